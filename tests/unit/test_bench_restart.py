"""kctl.bench.restart's reading of the nodes' logs: a broker's own stop and start within a roll's window."""

import pytest

from kctl.bench import restart

SUPERVISOR = """\
2026-11-28 23:05:00,000 INFO spawned: 'kafka' with pid 100
2026-11-28 23:07:25,536 INFO waiting for kafka to stop
2026-11-28 23:07:27,561 INFO waiting for kafka to stop
2026-11-28 23:07:29,150 WARN stopped: kafka (exit status 143)
2026-11-28 23:07:29,953 INFO waiting for zookeeper to stop
2026-11-28 23:07:30,653 WARN stopped: zookeeper (exit status 143)
2026-11-28 23:07:31,657 INFO spawned: 'kafka' with pid 557
2026-11-28 23:07:32,009 INFO spawned: 'zookeeper' with pid 589
2026-11-28 23:09:00,000 INFO waiting for kafka to stop
"""
SERVER = """\
[2026-11-28 23:05:04,000] INFO [KafkaServer id=2] started (kafka.server.KafkaServer)
[2026-11-28 23:07:25,560] INFO [KafkaServer id=2] shutting down (kafka.server.KafkaServer)
[2026-11-28 23:07:38,323] INFO [KafkaServer id=2] started (kafka.server.KafkaServer)
"""


def _at(stamp: str) -> float:
    return restart._stamp(stamp)


def test_the_restart_within_the_window_is_read_from_both_logs() -> None:
    stop, start = restart.broker_phases(SUPERVISOR, SERVER, _at("2026-11-28 23:07:20,000"),
                                        _at("2026-11-28 23:08:00,000"))
    assert stop == pytest.approx(29.150 - 25.536)  # the first SIGTERM report to the exit, not the second report
    assert start == pytest.approx(38.323 - 31.657)  # kafka's spawn, not ZooKeeper's; the start before is outside


def test_a_window_without_the_broker_back_is_an_error() -> None:
    with pytest.raises(SystemExit, match="no whole broker restart.*found \\['spawned', 'stopped', 'waiting'\\]"):
        restart.broker_phases(SUPERVISOR, SERVER, _at("2026-11-28 23:07:20,000"), _at("2026-11-28 23:07:35,000"))


def test_catch_up_is_the_under_replicated_gates_less_their_hold() -> None:
    result = {"gates": [
        {"step": "[1/3] logger1 node", "gate": "broker registered (every broker sees it)", "seconds": 2.5},
        {"step": "[1/3] logger1 node", "gate": "under-replicated partitions 0 for 1 s of consecutive checks",
         "seconds": 3.5},
        {"step": "[2/3] logger2 node", "gate": "under-replicated partitions 0 for 1 s of consecutive checks",
         "seconds": 0.8},
    ]}
    assert restart.catch_up_seconds(result, 1.0) == pytest.approx(2.5)
