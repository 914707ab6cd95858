"""Free host ports: outside the kernel's ephemeral range, and never the same port to two choosers at once."""

from __future__ import annotations

import multiprocessing
import socket
from pathlib import Path

import pytest

from kctl.runtime import ports


@pytest.fixture(autouse=True)
def own_reservations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports.tempfile, "gettempdir", lambda: str(tmp_path))


def test_ports_are_free_distinct_and_outside_the_ephemeral_range() -> None:
    got = ports.free_ports(20)
    assert len(set(got)) == 20
    eph = ports._ephemeral_range()
    for p in got:
        assert ports._POOL[0] <= p <= ports._POOL[1]
        assert eph is None or not eph[0] <= p <= eph[1]
        assert ports.port_free(p)


def test_a_reserved_port_is_not_handed_out_again_until_it_is_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    first = set(ports.free_ports(50))
    second = set(ports.free_ports(50))
    assert not first & second
    # An hour later the reservations are stale: the pool is whole again.
    monkeypatch.setattr(ports, "_RESERVED_FOR_S", -1.0)
    directory = ports._reservations()
    assert ports._reserve(directory, next(iter(first)), ports.time.time())


def test_a_port_something_listens_on_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        held = s.getsockname()[1]
        monkeypatch.setattr(ports, "_POOL", (held, held))
        monkeypatch.setattr(ports, "_ephemeral_range", lambda: None)
        with pytest.raises(ports.KctlError, match="found only 0 of 1 free host ports"):
            ports.free_ports(1)
    assert ports.free_ports(1) == [held]  # free again once its listener closed


def _choose(q: multiprocessing.Queue[list[int]], d: str) -> None:
    ports.tempfile.gettempdir = lambda: d  # type: ignore[assignment]
    q.put(ports.free_ports(200))


def test_processes_choosing_at_once_never_share_a_port(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    q: multiprocessing.Queue[list[int]] = ctx.Queue()
    procs = [ctx.Process(target=_choose, args=(q, str(tmp_path))) for _ in range(4)]
    for p in procs:
        p.start()
    got = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    flat = [p for g in got for p in g]
    assert len(flat) == 800 and len(set(flat)) == 800


def test_runs_of_consecutive_ports_are_free_reserved_and_outside_the_ephemeral_range() -> None:
    """A spec's port bases (tests/integration/ports.free_bases): each run whole, never inside the ephemeral range,
    never handed out twice, and never over a port free_ports reserved."""
    single = set(ports.free_ports(30))
    first = ports.free_runs(5, 4)
    second = ports.free_runs(5, 4)
    eph = ports._ephemeral_range()
    taken = [p for b in first + second for p in range(b, b + 4)]
    assert len(taken) == len(set(taken)) == 40 and not set(taken) & single
    for p in taken:
        assert ports._POOL[0] <= p <= ports._POOL[1] and (eph is None or not eph[0] <= p <= eph[1])


def test_a_run_with_one_port_held_is_skipped_and_its_other_ports_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    directory = ports._reservations()
    monkeypatch.setattr(ports, "_ephemeral_range", lambda: None)
    monkeypatch.setattr(ports, "_POOL", (21000, 21029))
    assert ports._reserve(directory, 21002, ports.time.time())  # another chooser holds a port of the first run
    assert ports.free_runs(1, 3) == [21010]
    assert not (directory / "21000").exists() and not (directory / "21001").exists()  # given back
    with pytest.raises(ports.KctlError, match="found only 1 of 2 runs of 3 free host ports"):
        ports.free_runs(2, 3)
