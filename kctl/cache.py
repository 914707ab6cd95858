"""kctl's shared caches under ``${XDG_CACHE_HOME:-~/.cache}/kctl``: every entry complete or absent.

Several kctl processes share these caches (a ``kctl bundle`` beside ``make demo``'s image build, two test
workers, two operators' ``kctl up``): the Kafka distribution (``dist/``), the exporters' jars
(``exporters/``), Spark's jars (``jars/``) and the hosts' tar of the distribution (``host/``). Each is filled
through :func:`fill_dir` or :func:`fill_file`, which

- take an exclusive ``flock`` beside the entry (``.<name>.lock``; the kernel drops it when its process dies,
  however it dies), so one process fills and the others wait, then find the entry made;
- fill a temporary sibling (``.<name>.partial-*``), never the entry itself, and mark a directory complete
  (``.complete``, written last) before renaming it into place whole: a reader sees the old entry, no
  entry, or the new one complete, never a half-filled one;
- sweep, under the lock, what a process killed mid-fill left (its ``.partial-*`` sibling): the next fill
  starts afresh and completes the entry.

Neutral: imports nothing but the error type and kctl's one wait.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kctl.errors import KctlError, TimeoutReached

MARKER = ".complete"
# How long a fill waits for another process's fill of the same entry (a Kafka download or a Maven resolve
# of a few minutes on a slow link); the lock is a live process's (flock dies with its holder).
LOCK_WAIT_S = 1800.0

Progress = Callable[[str], None]


def root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/kctl``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kctl"


def is_complete(entry: Path) -> bool:
    """Whether a directory entry was filled whole (its marker is written last, before the rename)."""
    return (entry / MARKER).is_file()


def lock_path(entry: Path) -> Path:
    return entry.with_name(f".{entry.name}.lock")


@contextmanager
def locked(entry: Path, *, progress: Progress | None = None, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the entry's lock (exclusive); says so once when another process holds it and this one waits."""
    from kctl.wait import wait_until

    path = lock_path(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        def take() -> tuple[bool, str]:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False, f"{path} is held by another kctl"
            return True, "taken"

        if not take()[0]:
            if progress:
                progress(f"waiting for another kctl that is filling {entry}")
            try:
                wait_until(f"the lock of {entry}", take, wait_s, poll=0.2, hint=None)
            except TimeoutReached:
                raise KctlError(f"another kctl has been filling {entry} for {wait_s:.0f}s", hint=(
                    f"is a `kctl` (or `make`) still running? `fuser {path}` names it; once it ends,"
                    " run this again")) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def _sweep(entry: Path) -> None:
    """What killed fills of ``entry`` left beside it (only ever called under its lock)."""
    for prefix in (f".{entry.name}.partial-", f".{entry.name}.old-"):
        for left in entry.parent.glob(f"{prefix}*"):
            if left.is_dir() and not left.is_symlink():
                shutil.rmtree(left, ignore_errors=True)
            else:
                left.unlink(missing_ok=True)


def _mark(entry: Path, note: str) -> None:
    fd = os.open(entry / MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(note if note.endswith("\n") or not note else note + "\n")
        f.flush()
        os.fsync(f.fileno())


def _swap_in(new: Path, entry: Path) -> None:
    """``new`` renamed to ``entry``; an old entry moved aside first and removed after (a directory cannot be
    renamed over a non-empty one)."""
    old: Path | None = None
    if entry.exists() or entry.is_symlink():
        old = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{entry.name}.old-"))
        os.rename(entry, old / "entry")
    os.rename(new, entry)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def fill_dir(entry: Path, make: Callable[[Path], Path | None], *,
             complete: Callable[[Path], bool] | None = None, note: Callable[[], str] | None = None,
             refresh: bool = False, progress: Progress | None = None) -> Path:
    """The cache directory ``entry``, made by ``make`` unless it is complete already (``refresh``: made again).

    ``make(work)`` fills the empty scratch directory ``work`` and returns the directory (``work`` or one
    below it; None: ``work``) that becomes the entry. The entry gets :data:`MARKER` (with ``note()``'s text)
    and is renamed into place whole. ``complete`` says whether an entry found is usable (default: it has
    its marker); another process's fill of the same entry is waited for, then its result taken.
    """
    done = complete or is_complete
    if not refresh and done(entry):
        return entry
    with locked(entry, progress=progress):
        if not refresh and done(entry):
            return entry  # another process filled it while this one waited
        _sweep(entry)
        work = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{entry.name}.partial-"))
        try:
            made = make(work) or work
            made = made.resolve()
            if made != work.resolve() and work.resolve() not in made.parents:
                raise KctlError(f"internal: {made} is not inside the scratch directory {work}")
            _mark(made, note() if note else "")
            _swap_in(made, entry)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return entry


def fill_file(entry: Path, make: Callable[[Path], None], *, mode: int = 0o644,
              progress: Progress | None = None) -> Path:
    """The cache file ``entry``, written by ``make(tmp)`` into a temporary sibling and renamed into place
    (os.replace: atomic) unless it exists already; another process's fill is waited for."""
    if entry.is_file():
        return entry
    with locked(entry, progress=progress):
        if entry.is_file():
            return entry
        _sweep(entry)
        fd, name = tempfile.mkstemp(dir=entry.parent, prefix=f".{entry.name}.partial-")
        os.close(fd)
        tmp = Path(name)
        try:
            make(tmp)
            os.chmod(tmp, mode)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, entry)
        finally:
            tmp.unlink(missing_ok=True)
    return entry
