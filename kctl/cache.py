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

Readers hold the same lock shared (``LOCK_SH``: :func:`reading`, :func:`use_dir`, :func:`use_file`,
:func:`hold_for_process`) for as long as they read, copy or hard-link from an entry: a refill of an entry that
exists (a refresh, an entry an older kctl left without its marker, a distribution that is no longer current)
takes the lock exclusive, so it waits until no reader is left, and no reader starts while it swaps the entry.
A reader sees the whole old entry or the whole new one, never a file missing under it. A lock waited for is
polled (``LOCK_NB``), so a fill waiting for readers never blocks another reader, and a fill never waits on a
reader of its own thread (:func:`locked` refuses that at once instead of waiting for itself).

Neutral: imports nothing but the error type and kctl's one wait.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from kctl.errors import KctlError, TimeoutReached
from kctl.wait import wait_until

MARKER = ".complete"
# How long a fill waits for another process's fill of the same entry (a Kafka download or a Maven resolve
# of a few minutes on a slow link) or its readers, and a reader for a fill; the lock is a live process's (flock
# dies with its holder).
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


_held = threading.local()  # the entries this thread holds shared: {str(entry): count}


def _reads() -> Counter[str]:
    if not hasattr(_held, "reads"):
        _held.reads = Counter()
    reads: Counter[str] = _held.reads
    return reads


def _acquire(entry: Path, *, shared: bool, progress: Progress | None, wait_s: float, path: Path,
             what: str | None) -> int:
    """A descriptor of ``path`` holding its flock (shared or exclusive), waited for up to ``wait_s``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, (os.O_RDONLY if shared else os.O_RDWR) | os.O_CREAT, 0o644)
    doing = what or ("filling" if shared else "filling or reading")

    def take() -> tuple[bool, str]:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            return False, f"{path} is held by another kctl"
        return True, "taken"

    try:
        if not take()[0]:
            if progress:
                progress(f"waiting for another kctl that is {doing} {entry}")
            try:
                wait_until(f"the lock of {entry}", take, wait_s, poll=0.2, hint=None)
            except TimeoutReached:
                raise KctlError(f"another kctl has been {doing} {entry} for {wait_s:.0f}s", hint=(
                    f"is a `kctl` (or `make`) still running? `fuser {path}` names it; once it ends,"
                    " run this again")) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def locked(entry: Path, *, shared: bool = False, progress: Progress | None = None, wait_s: float = LOCK_WAIT_S,
           path: Path | None = None, what: str | None = None) -> Iterator[None]:
    """Hold the entry's lock (``path``, default :func:`lock_path`): exclusive to fill it, ``shared`` to read
    it. Says so once when this one waits (``what``: what the other kctl does, for the message). Exclusive
    while this thread reads the entry is refused at once (a flock on another descriptor would wait for this
    very thread)."""
    key = str(entry)
    if not shared and _reads()[key]:
        raise KctlError(f"internal: this kctl reads {entry} and would wait for itself to fill it again",
                        hint="report this as a bug in kctl")
    fd = _acquire(entry, shared=shared, progress=progress, wait_s=wait_s, path=path or lock_path(entry), what=what)
    if shared:
        _reads()[key] += 1
    try:
        yield
    finally:
        if shared:
            _reads()[key] -= 1
        os.close(fd)  # releases the lock


def reading(entry: Path, *, progress: Progress | None = None, wait_s: float = LOCK_WAIT_S
            ) -> AbstractContextManager[None]:
    """Hold ``entry`` for reading (its lock shared): no other kctl swaps it out until the block ends; a fill
    under way is waited for first. The caller checks the entry is (still) whole once inside."""
    return locked(entry, shared=True, progress=progress, wait_s=wait_s)


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


ATTEMPTS = 3  # fills a reader makes before it gives up on an entry other kctl processes keep swapping


@contextmanager
def use_dir(entry: Path, make: Callable[[Path], Path | None], *,
            complete: Callable[[Path], bool] | None = None, note: Callable[[], str] | None = None,
            refresh: bool = False, progress: Progress | None = None) -> Iterator[Path]:
    """:func:`fill_dir`, then the entry held for reading (:func:`reading`) until the block ends, whole: it is
    checked again under the shared lock, and made again if a fill killed between its two renames left none."""
    done = complete or is_complete
    for attempt in range(ATTEMPTS):
        fill_dir(entry, make, complete=done, note=note, refresh=refresh and attempt == 0, progress=progress)
        with reading(entry, progress=progress):
            if done(entry):
                yield entry
                return
    raise KctlError(f"the cache entry {entry} keeps changing under this kctl",
                    hint="another kctl keeps filling it again; run this again once it is done")


@contextmanager
def use_file(entry: Path, make: Callable[[Path], None], *, mode: int = 0o644,
             progress: Progress | None = None) -> Iterator[Path]:
    """:func:`fill_file`, then the file held for reading (:func:`reading`) until the block ends."""
    for _ in range(ATTEMPTS):
        fill_file(entry, make, mode=mode, progress=progress)
        with reading(entry, progress=progress):
            if entry.is_file():
                yield entry
                return
    raise KctlError(f"the cache file {entry} keeps disappearing under this kctl",
                    hint="is something cleaning kctl's cache? run this again once it is done")


def entry_of(path: Path) -> Path | None:
    """The cache directory entry that holds ``path`` (the nearest directory above it with :data:`MARKER`,
    inside :func:`root`), or None for a path outside kctl's cache."""
    try:
        rel = path.resolve().relative_to(root().resolve())
    except ValueError:
        return None
    here = root().resolve()
    found: Path | None = None
    for part in rel.parts[:-1]:
        here = here / part
        if is_complete(here):
            found = here
    return found


_process_holds: list[int] = []  # descriptors holding shared locks until this process ends (the kernel drops them)


def hold_for_process(paths: Iterable[str | Path], *, progress: Progress | None = None) -> list[Path]:
    """Hold, until this process ends, every cache entry one of ``paths`` lies in, for reading: for a reader
    that hands the paths on to something that reads them for its whole life (Spark's ``spark.jars``). Returns
    the entries held; KctlError when one of ``paths`` is gone once its entry is held (another kctl made the
    entry again in between): resolving them again gives the new ones."""
    paths = list(paths)
    held: list[Path] = []
    for p in paths:
        entry = entry_of(Path(p))
        if entry is None or entry in held:
            continue
        _process_holds.append(_acquire(entry, shared=True, progress=progress, wait_s=LOCK_WAIT_S,
                                       path=lock_path(entry), what=None))
        _reads()[str(entry)] += 1  # never released: a fill of it from this thread is refused, not waited for
        held.append(entry)
    gone = [str(p) for p in paths if not Path(p).exists()]
    if gone:
        raise KctlError(f"{', '.join(gone)}: no longer in kctl's cache (another kctl made the entry again)",
                        hint="run the command again: it resolves the jars anew")
    return held
