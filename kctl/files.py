"""Reading text files that other processes are writing: the last N lines, and tail -F; and writing kctl's own
state files durably (:func:`write_durable`: whole or not at all, through a crash).

Used by the log agent (shipping an access log) and by ``kctl logs`` (a node's
ZooKeeper or Kafka log, bind-mounted under the state dir). Neutral: imports
nothing but the error type and kctl's one wait (``kctl.wait``, which
itself imports nothing but the error type), so that neither user pulls in the other.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from kctl.errors import KctlError, TimeoutReached
from kctl.wait import wait_until


def tail_start(path: Path, lines: int, *, block: int = 64 * 1024) -> int:
    """The offset at which the last ``lines`` lines of ``path`` begin (0 if it has fewer).

    Reads backwards in blocks, so a large log costs as much as its tail. A last
    line without its newline counts as a line; ``lines <= 0`` gives the end.
    """
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        if lines <= 0 or end == 0:
            return end
        f.seek(end - 1)
        # The newline that ends the file closes the last line; it does not start one.
        pos = end - 1 if f.read(1) == b"\n" else end
        found = 0
        while pos > 0:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            i = len(chunk)
            while (i := chunk.rfind(b"\n", 0, i)) >= 0:
                found += 1
                if found == lines:
                    return pos + i + 1
        return 0


def follow_lines(
    path: Path,
    *,
    follow: bool,
    max_seconds: float,
    max_lines: int | None,
    poll_s: float = 0.2,
    start: int = 0,
    skip_blank: bool = True,
) -> Iterator[tuple[int, str]]:
    """(offset, line) of a file from ``start``; with ``follow``, tail -F.

    Following waits for the file to appear and to grow, and survives rotation
    (the file renamed or deleted and a new one created: what the writer added
    to the old file before the rename is read first, then the new file from
    its start) and truncation in place (read again from offset 0). It stops
    after ``max_seconds`` or ``max_lines``, whichever comes first.
    """
    lines = _lines(path, follow=follow, deadline=time.monotonic() + max_seconds, poll_s=poll_s, start=start,
                   skip_blank=skip_blank)
    for sent, item in enumerate(lines, 1):
        yield item
        if max_lines is not None and sent >= max_lines:
            return


def _lines(
    path: Path, *, follow: bool, deadline: float, poll_s: float, start: int, skip_blank: bool
) -> Iterator[tuple[int, str]]:
    def pause(what: str, probe: Callable[[], tuple[bool, str]]) -> bool:
        """Wait for ``probe`` until the follow window ends; False when it ended first. That is no error:
        the window is how long the caller asked to follow (``max_seconds``), and what came is the answer."""
        try:
            wait_until(what, probe, max(0.0, deadline - time.monotonic()), poll=poll_s)
        except TimeoutReached:
            return False
        return True

    offset = start
    while True:
        try:
            f = path.open("rb")
        except FileNotFoundError:
            if not follow:
                raise KctlError(f"{path}: no such file") from None
            if not pause(f"{path} to appear", lambda: (path.exists(), "no such file")):
                return
            continue
        with f:
            st = os.fstat(f.fileno())
            ino = st.st_ino
            if offset > st.st_size:  # truncated while we were not looking
                offset = 0
            f.seek(offset)
            partial = b""
            while True:
                raw = f.readline()
                if raw.endswith(b"\n"):
                    line = _decode(partial + raw)
                    begin, offset, partial = offset, offset + len(partial) + len(raw), b""
                    if line or not skip_blank:
                        yield begin, line
                    continue
                partial += raw  # incomplete last line: wait for its newline
                if not follow:
                    if partial:
                        yield offset, _decode(partial)
                    return
                if not pause(f"{path} to change", _changed(path, ino, offset + len(partial))):
                    return
                try:
                    now = path.stat()
                except FileNotFoundError:
                    now = None
                if now is None or now.st_ino != ino:
                    # Rotated: the open file still holds what was written before the rename.
                    rest = partial + f.read()
                    for raw in rest.splitlines(keepends=True):
                        line = _decode(raw)
                        if line or not skip_blank:
                            yield offset, line
                        offset += len(raw)
                    offset = 0
                    break
                if now.st_size < offset + len(partial):
                    offset, partial = 0, b""  # truncated in place: the writer starts over
                    f.seek(0)
                    continue
                f.seek(offset + len(partial))


def _changed(path: Path, ino: int, read_to: int) -> Callable[[], tuple[bool, str]]:
    """A probe: has the file grown past ``read_to``, shrunk below it, or been replaced (rotated)?"""
    def probe() -> tuple[bool, str]:
        try:
            st = path.stat()
        except FileNotFoundError:
            return True, "gone (rotated)"
        if st.st_ino != ino:
            return True, "a new file (rotated)"
        return st.st_size != read_to, f"{st.st_size} bytes, read to {read_to}"
    return probe


def _decode(raw: bytes) -> str:
    return raw.rstrip(b"\r\n").decode("utf-8", errors="replace")


# ----- durable writes: kctl's state files -----------------------------------------------------------------------


def write_durable(path: Path, data: bytes | str, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` so that a crash at any moment leaves the old file or the new one, whole.

    A temporary sibling created with ``mode`` from the start (``os.open``: never wider for a moment, whatever
    the umask), written, flushed and fsynced, renamed over ``path`` (``os.replace``), then the directory
    fsynced so that the rename itself is on disk. Without the fsyncs a crash after the rename can leave an empty
    file where the old one was (ext4's delayed allocation, XFS). OSError propagates; no temporary file stays."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have narrowed it; it never widens what mode allows
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """fsync a directory (a rename or a new file in it is then on disk); a no-op where directories cannot be
    opened (Windows)."""
    try:
        dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
