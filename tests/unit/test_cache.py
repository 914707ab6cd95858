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
from kctl.errors import KctlError

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
    from kctl.runtime.image import exporters, maven

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


# ----- readers during a refill (issue 43, point 20): each holds the entry shared while it reads -------------
# A refill of an entry that exists (a refresh, an entry that is no longer current or lost its marker) used to
# rename it aside while another process read or hard-linked from it: FileNotFoundError half-way through. A
# reader in the middle of an entry now sees all of the old one or (started after the swap) all of the new one.

READ_PAUSE = 0.01


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _fake_dist_source(tag: str) -> object:
    from kctl.runtime.image.artifacts import layout, scripts

    class Fake:
        name = "maven"

        def fetch(self, work: Path, kafka_version: str, scala_version: str, progress: object) -> tuple[Path, str]:
            import zipfile

            root = work / f"kafka_{scala_version}-{kafka_version}"
            libs = root / "libs"
            libs.mkdir(parents=True)
            with zipfile.ZipFile(libs / f"kafka_{scala_version}-{kafka_version}.jar", "w") as zf:
                for cls in layout.REQUIRED_CLASSES:
                    zf.writestr(cls.replace(".", "/") + ".class", b"")
            with zipfile.ZipFile(libs / "zookeeper-3.8.4.jar", "w") as zf:
                zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
            for i in range(FILES):
                (libs / f"part-{i}.jar").write_text(f"{tag}-{i}")
            scripts.write_bin_scripts(root, overwrite=True, kafka_version=kafka_version)
            return root, f"fake {tag}"

    return Fake()


def _use(kind: str, xdg: str, tag: str, refill: bool) -> object:
    """The context manager a kctl reader of ``kind`` reads through (refill=False), or a refill of the same
    entry that makes its ``tag`` version (refill=True: returns the entry)."""
    os.environ["XDG_CACHE_HOME"] = xdg
    from kctl.runtime.image import artifacts as distmod
    from kctl.runtime.image import exporters, maven

    def make(work: Path) -> None:
        for i in range(FILES):
            (work / f"part-{i}").write_text(f"{tag}-{i}")

    if kind == "dist":
        distmod.DEFAULT_SOURCES = (_fake_dist_source(tag),)  # type: ignore[assignment]
        if refill:
            return distmod.prepare_dist(kafka_version="3.9.1", refresh=True).path
        return distmod.using_dist(kafka_version="3.9.1")
    if kind == "exporters":
        def copy_dependencies(artifacts: list[object], out: Path, **_kw: object) -> list[Path]:
            out.mkdir(parents=True)
            made = [out / f"{str(a).split(':')[1]}-{tag}.jar" for a in artifacts]
            for jar in made:
                jar.write_text(tag)
            return made

        maven.copy_dependencies = copy_dependencies  # type: ignore[assignment]
        if refill:  # an entry filled again over one that exists (what a refill of a lost marker does)
            return cache.fill_dir(exporters.cache_dir(), exporters._make(None), complete=exporters._complete,
                                  refresh=True)
        return exporters.prepared()
    entry = Path(xdg) / "kctl" / "jars" / "e"
    return cache.fill_dir(entry, make, refresh=True) if refill else cache.use_dir(entry, make)


def _read_slowly(kind: str, xdg: str, inside: str, out: str) -> None:
    """Hold the entry as a kctl reader of ``kind`` does and read every file of it, one at a time, while
    another process refills it; write what was read (or the error) to ``out``."""
    import json

    view: dict[str, str] = {}
    try:
        with _use(kind, xdg, "old", refill=False) as got:  # type: ignore[attr-defined]
            root = got.path if kind == "dist" else got
            Path(inside).write_text(str(root))
            time.sleep(0.3)  # the refill starts meanwhile, and waits
            for p in sorted(root.rglob("*")):
                if p.is_file():
                    time.sleep(READ_PAUSE)
                    view[str(p.relative_to(root))] = p.read_bytes().decode("latin-1")
            done = time.monotonic()
    except Exception as exc:  # reported to the test
        Path(out).write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        raise
    Path(out).write_text(json.dumps({"view": view, "done": done}))


def _refill(kind: str, xdg: str, inside: str, out: str) -> None:
    import json

    while not Path(inside).exists():
        time.sleep(0.01)
    time.sleep(0.05)
    _use(kind, xdg, "new", refill=True)
    Path(out).write_text(json.dumps({"swapped": time.monotonic()}))


@pytest.mark.parametrize("kind", ["cache", "dist", "exporters"])
def test_a_reader_in_the_middle_of_an_entry_during_a_refill_sees_all_of_the_old_one(tmp_path: Path,
                                                                                    kind: str) -> None:
    import json

    xdg = str(tmp_path / "xdg")
    first = CTX.Process(target=_made, args=(kind, xdg))  # the old entry, made whole first
    first.start()
    first.join(30)
    assert first.exitcode == 0
    entry = Path((tmp_path / "xdg" / "entry").read_text())
    old = _snapshot(entry)
    assert any("old" in v.decode("latin-1") for v in old.values())
    inside, seen, swapped = tmp_path / "inside", tmp_path / "seen.json", tmp_path / "swapped.json"
    reader = CTX.Process(target=_read_slowly, args=(kind, xdg, str(inside), str(seen)))
    refill = CTX.Process(target=_refill, args=(kind, xdg, str(inside), str(swapped)))
    reader.start()
    refill.start()
    for p in (reader, refill):
        p.join(60)
    got = json.loads(seen.read_text())
    assert "error" not in got, got["error"]  # never a file gone under the reader
    assert reader.exitcode == 0 and refill.exitcode == 0
    assert got["view"] == {k: v.decode("latin-1") for k, v in old.items()}  # all of the old entry, only it
    assert json.loads(swapped.read_text())["swapped"] > got["done"]  # the refill waited for the reader
    new = _snapshot(entry)
    assert new != old and any("new" in v.decode("latin-1") for v in new.values())  # and then swapped it whole
    # a reader after the refill reads all of the new one
    reader = CTX.Process(target=_read_slowly, args=(kind, xdg, str(tmp_path / "inside2"), str(seen)))
    reader.start()
    reader.join(30)
    assert json.loads(seen.read_text())["view"] == {k: v.decode("latin-1") for k, v in new.items()}
    leftovers = [p.name for p in entry.parent.iterdir() if ".partial-" in p.name or ".old-" in p.name]
    assert not leftovers


def _made(kind: str, xdg: str) -> None:
    with _use(kind, xdg, "old", refill=False) as got:  # type: ignore[attr-defined]
        (Path(xdg) / "entry").write_text(str(got.path if kind == "dist" else got))


def _hold_jars(xdg: str, jar: str, inside: str, out: str) -> None:
    """What a Spark job does with its jars (its Spark session, kctl.stream.job): held until the process ends."""
    import json

    os.environ["XDG_CACHE_HOME"] = xdg
    cache.hold_for_process([jar])
    Path(inside).write_text("held")
    read = []
    for _ in range(5):
        time.sleep(0.1)
        read.append(Path(jar).read_text())
    Path(out).write_text(json.dumps({"read": read, "done": time.monotonic()}))
    os._exit(0)  # no cleanup: the kernel drops the lock with the process


def _refill_jars(xdg: str, entry: str, inside: str, out: str) -> None:
    import json

    os.environ["XDG_CACHE_HOME"] = xdg
    while not Path(inside).exists():
        time.sleep(0.01)
    cache.fill_dir(Path(entry), lambda work: (work / "a.jar").write_text("new") and None, refresh=True)
    Path(out).write_text(json.dumps({"swapped": time.monotonic()}))


def test_jars_a_spark_job_uses_are_held_until_its_process_ends(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    entry = cache.root() / "jars" / "spark-sql-kafka-4.0.0"
    cache.fill_dir(entry, lambda work: (work / "a.jar").write_text("old") and None)
    jar = entry / "a.jar"
    assert cache.entry_of(jar) == entry.resolve() and cache.entry_of(tmp_path / "elsewhere.jar") is None
    inside, seen, swapped = tmp_path / "inside", tmp_path / "seen.json", tmp_path / "swapped.json"
    job = CTX.Process(target=_hold_jars, args=(str(tmp_path / "xdg"), str(jar), str(inside), str(seen)))
    refill = CTX.Process(target=_refill_jars, args=(str(tmp_path / "xdg"), str(entry), str(inside), str(swapped)))
    job.start()
    refill.start()
    for p in (job, refill):
        p.join(30)
    assert (job.exitcode, refill.exitcode) == (0, 0)
    got = json.loads(seen.read_text())
    assert got["read"] == ["old"] * 5 and json.loads(swapped.read_text())["swapped"] > got["done"]
    assert jar.read_text() == "new"
    # a jar gone by the time its entry is held (made again in between): said, to resolve them anew
    with pytest.raises(KctlError, match="no longer in kctl's cache"):
        cache.hold_for_process([entry / "gone.jar"])


def test_a_fill_under_its_own_read_is_refused_at_once_not_waited_for(tmp_path: Path) -> None:
    entry = tmp_path / "e"
    cache.fill_dir(entry, lambda work: (work / "v1").write_text("1") and None)
    started = time.monotonic()
    with cache.reading(entry), pytest.raises(KctlError, match="would wait for itself"):
        cache.fill_dir(entry, lambda work: None, refresh=True)
    assert time.monotonic() - started < 5
    with cache.use_dir(entry, lambda work: None) as held, cache.reading(entry):  # two reads share an entry
        assert (held / "v1").read_text() == "1"
    cache.fill_dir(entry, lambda work: (work / "v2").write_text("2") and None, refresh=True)  # no read left
    assert sorted(x.name for x in entry.iterdir()) == [cache.MARKER, "v2"]


def _try_exclusive(lock: str, out: str) -> None:
    import fcntl

    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        Path(out).write_text("free")
    except BlockingIOError:
        Path(out).write_text("held")


def _probe(lock: Path, tmp_path: Path) -> str:
    """From another process: could a refill take ``lock`` now?"""
    out = tmp_path / f"probe-{time.monotonic_ns()}"
    p = CTX.Process(target=_try_exclusive, args=(str(lock), str(out)))
    p.start()
    p.join(10)
    return out.read_text()


def test_a_bundle_holds_the_host_tar_while_it_links_it_and_the_dist_while_it_packs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tarfile
    from typing import Any

    from kctl.model.spec import ClusterSpec
    from kctl.runtime.engine import bundle
    from kctl.runtime.image import artifacts as distmod

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(distmod, "DEFAULT_SOURCES", (_fake_dist_source("old"),))
    nodes = [{"id": i, "hostname": f"logger{i}", "advertised_host": f"10.9.0.{i}"} for i in (1, 2, 3)]
    spec = ClusterSpec.model_validate({"name": "hl", "engine": "hosts", "ssh": {"user": "ops"}, "nodes": nodes,
                                       "monitoring": {"enabled": False}})
    dist_lock = cache.lock_path(distmod.cache_root() / "kafka_2.13-3.9.1")
    seen: list[str] = []
    real_add = tarfile.TarFile.add

    def add(self: tarfile.TarFile, name: str, arcname: str | None = None, *a: Any, **kw: Any) -> None:
        if arcname == "kafka_2.13-3.9.1":
            seen.append(_probe(dist_lock, tmp_path))  # while packing: the dist is held
        real_add(self, name, arcname, *a, **kw)

    monkeypatch.setattr(tarfile.TarFile, "add", add)
    with bundle.dist_archive(spec) as arch:
        assert arch.path.is_file()
        assert _probe(cache.lock_path(arch.path), tmp_path) == "held"  # no refill while bundles link it
        assert _probe(dist_lock, tmp_path) == "free"  # packed: the dist is no longer needed
    assert seen == ["held"]
    assert _probe(cache.lock_path(arch.path), tmp_path) == "free"
