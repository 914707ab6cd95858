"""The unit suite's guard (tests/unit/conftest.py) refuses the Docker socket and real ports, not fakes."""

from __future__ import annotations

import socket

import pytest

from tests.unit import conftest
from tests.unit.fake_zk import fake_zk, free_port


def _refused_and_forgiven(sock: socket.socket, address: object) -> str:
    """Connect, expect the guard's refusal, and take it off this test's record (the guard's own test)."""
    with pytest.raises(ConnectionRefusedError, match="unit tests must not connect to") as ei:
        sock.connect(address)
    assert conftest._VIOLATIONS, "the refusal was not recorded: the test would not fail"
    conftest._VIOLATIONS.clear()
    return str(ei.value)


def test_the_docker_socket_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        assert "the Docker socket /var/run/docker.sock" in _refused_and_forgiven(s, "/var/run/docker.sock")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/docker.sock")
    with socket.socket(socket.AF_UNIX) as s:
        assert "docker.sock" in _refused_and_forgiven(s, f"{tmp_path}/docker.sock")


def test_a_real_port_is_refused_by_connect_and_connect_ex() -> None:
    with socket.socket() as s:
        assert "a real port 10.255.255.1:2375" in _refused_and_forgiven(s, ("10.255.255.1", 2375))
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", 1)) != 0
    assert conftest._VIOLATIONS == ["a real port 127.0.0.1:1 (not a port the tests bound)"]
    conftest._VIOLATIONS.clear()


def test_a_fake_server_of_the_test_and_a_port_it_bound_are_allowed() -> None:
    with fake_zk("leader") as zk, socket.create_connection(("127.0.0.1", zk.port), timeout=2) as s:
        s.sendall(b"ruok")
        assert s.recv(16) == b"imok"
    with socket.socket() as s, pytest.raises(ConnectionRefusedError) as ei:
        s.connect(("127.0.0.1", free_port()))  # bound and closed by the test: refused by the kernel, not the guard
    assert "unit tests must not" not in str(ei.value)
    assert conftest._VIOLATIONS == []


def test_a_librdkafka_client_on_a_real_port_is_refused_and_on_a_bound_one_made() -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    with pytest.raises(ConnectionRefusedError, match="a real Kafka bootstrap server 127.0.0.1:19092"):
        AdminClient({"bootstrap.servers": "127.0.0.1:19092"})
    assert conftest._VIOLATIONS == [
        "a real Kafka bootstrap server 127.0.0.1:19092 (a librdkafka client: not a port the tests bound)"]
    conftest._VIOLATIONS.clear()
    Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}"}).flush(0)  # nothing answers; nothing refused
    assert conftest._VIOLATIONS == []
