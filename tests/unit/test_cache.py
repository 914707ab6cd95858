"""kctl's shared caches (kctl/cache.py) with real processes: two fills of one entry at once make it once and
whole, a reader never sees it half-made, and a fill killed midway is completed by the next one. The exporters'
cache (the one two kctl commands broke, issue 43) is driven through its own prepare()."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from kctl import cache

CTX = multiprocessing.get_context("fork")
FILES = 6


def _slow_fill(entry: str, log: str, pause: float) -> None:
    """Fill ``entry`` with FILES files, ``pause`` s apart; each make() that runs appends a line to ``log``."""
    def make(work: Path) -> None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        for i in range(FILES):
            (work / f"part-{i}").write_text(str(i))
            time.sleep(pause)

    out = cache.fill_dir(Path(entry), make, note=lambda: "made")
    assert sorted(p.name for p in out.iterdir()) == sorted([cache.MARKER, *(f"part-{i}" for i in range(FILES))])


def _watch(entry: str, seen: str, seconds: float) -> None:
    """Record every look at ``entry``: absent, or the names it holds."""
    deadline = time.monotonic() + seconds
    with open(seen, "a") as f:
        while time.monotonic() < deadline:
            p = Path(entry)
            try:
                names = sorted(x.name for x in p.iterdir()) if p.exists() else None
            except FileNotFoundError:
                names = None
            if names is not None and cache.is_complete(p):
                names = sorted(x.name for x in p.iterdir())
                f.write("complete:" + ",".join(names) + "\n")
            elif names is None:
                f.write("absent\n")
            else:
                f.write("HALF:" + ",".join(names) + "\n")
            time.sleep(0.005)


def test_two_processes_filling_one_entry_make_it_once_and_a_reader_never_sees_it_half_made(tmp_path: Path) -> None:
    entry, log, seen = tmp_path / "c" / "exporters" / "abc", tmp_path / "makes.log", tmp_path / "seen.log"
    watcher = CTX.Process(target=_watch, args=(str(entry), str(seen), 2.0))
    watcher.start()
    fills = [CTX.Process(target=_slow_fill, args=(str(entry), str(log), 0.05)) for _ in range(2)]
    for p in fills:
        p.start()
    for p in [*fills, watcher]:
        p.join(30)
        assert p.exitcode == 0
    assert len(log.read_text().split()) == 1  # one make(): the second process waited and took the first's
    assert (entry / cache.MARKER).read_text() == "made\n"
    looks = seen.read_text().split()
    assert "absent" in looks and any(x.startswith("complete:") for x in looks)
    assert not [x for x in looks if x.startswith("HALF")]
    assert sorted(p.name for p in entry.parent.iterdir()) == [".abc.lock", "abc"]  # no scratch left


def _fill_then_hang(entry: str, started: str) -> None:
    def make(work: Path) -> None:
        (work / "part-0").write_text("0")
        Path(started).write_text(str(work))
        time.sleep(60)  # killed here

    cache.fill_dir(Path(entry), make)


def test_a_fill_killed_midway_leaves_no_entry_and_the_next_fill_completes_it(tmp_path: Path) -> None:
    entry, started = tmp_path / "jars" / "spark-sql-kafka-4.0.0", tmp_path / "started"
    p = CTX.Process(target=_fill_then_hang, args=(str(entry), str(started)))
    p.start()
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    scratch = Path(started.read_text())
    assert scratch.is_dir() and scratch.parent == entry.parent
    assert p.pid is not None
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert not entry.exists()  # nothing half-made in its place
    made = cache.fill_dir(entry, lambda work: (work / "jar").write_text("j") and None)  # the lock died with it
    assert cache.is_complete(made) and (made / "jar").read_text() == "j"
    assert not scratch.exists()  # what the killed fill left was swept
    assert sorted(x.name for x in entry.parent.iterdir()) == [f".{entry.name}.lock", entry.name]


def test_a_failed_fill_leaves_the_old_entry_or_nothing(tmp_path: Path) -> None:
    entry = tmp_path / "e"

    def broken(work: Path) -> None:
        (work / "half").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError):
        cache.fill_dir(entry, broken)
    assert not entry.exists() and sorted(x.name for x in tmp_path.iterdir()) == [".e.lock"]
    cache.fill_dir(entry, lambda work: (work / "v1").write_text("1") and None)
    with pytest.raises(OSError):
        cache.fill_dir(entry, broken, refresh=True)
    assert sorted(x.name for x in entry.iterdir()) == [cache.MARKER, "v1"]  # the old entry, whole
    cache.fill_dir(entry, lambda work: (work / "v2").write_text("2") and None, refresh=True)
    assert sorted(x.name for x in entry.iterdir()) == [cache.MARKER, "v2"]
    assert sorted(x.name for x in tmp_path.iterdir()) == [".e.lock", "e"]


def test_an_entry_without_its_marker_is_made_again(tmp_path: Path) -> None:
    entry = tmp_path / "e"
    entry.mkdir()
    (entry / "stale").write_text("from a fill cut short by an older kctl")
    cache.fill_dir(entry, lambda work: (work / "jar").write_text("j") and None)
    assert sorted(x.name for x in entry.iterdir()) == [cache.MARKER, "jar"]


def _pack(entry: str, log: str) -> None:
    def make(tmp: Path) -> None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        with tmp.open("wb") as f:
            for _ in range(20):
                f.write(b"x" * 4096)
                f.flush()
                time.sleep(0.01)

    cache.fill_file(Path(entry), make, mode=0o644)


def test_two_processes_packing_one_file_write_it_once_and_whole(tmp_path: Path) -> None:
    entry, log = tmp_path / "host" / "kafka.tar", tmp_path / "packs.log"
    procs = [CTX.Process(target=_pack, args=(str(entry), str(log))) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert len(log.read_text().split()) == 1
    assert entry.stat().st_size == 20 * 4096 and entry.stat().st_mode & 0o777 == 0o644
    assert sorted(x.name for x in entry.parent.iterdir()) == [".kafka.tar.lock", "kafka.tar"]


def _prepare_exporters(xdg: str) -> None:
    """exporters.prepare() with Maven replaced by a slow copy (so two processes overlap inside it)."""
    os.environ["XDG_CACHE_HOME"] = xdg
    from kctl.runtime import exporters, maven

    def copy_dependencies(artifacts: list[object], out: Path, **_kw: object) -> list[Path]:
        out.mkdir(parents=True)
        made = []
        for a in artifacts:
            jar = out / f"{str(a).split(':')[1]}-1.0.jar"
            time.sleep(0.2)
            jar.write_bytes(b"PK")
            made.append(jar)
        return made

    maven.copy_dependencies = copy_dependencies  # type: ignore[assignment]
    got = exporters.prepare()
    assert (got / exporters.AGENT_JAR).is_file(), sorted(str(p) for p in got.rglob("*"))
    assert len(list((got / exporters.ZOOKEEPER_DIR).glob("*.jar"))) == 3


def test_two_kctl_commands_preparing_the_exporters_at_once_both_get_the_agent_jar(tmp_path: Path) -> None:
    procs = [CTX.Process(target=_prepare_exporters, args=(str(tmp_path),)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
