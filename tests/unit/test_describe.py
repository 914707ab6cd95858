"""kctl.kafka.describe without a broker: librdkafka's answers (constructed ClusterMetadata and
DescribeClusterResult objects) mapped to Metadata, and the time bounds of fetch_any / fetch_each
around clients that answer, hang, refuse or are slow to destroy (a fake AdminClient; no socket)."""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from confluent_kafka import KafkaError, KafkaException, Node
from confluent_kafka.admin import (
    BrokerMetadata,
    ClusterMetadata,
    DescribeClusterResult,
    PartitionMetadata,
    TopicMetadata,
)

from kctl.kafka import client
from kctl.kafka import describe as kmd

CLUSTER_ID = "c1uSt3r-iD"
_ports = itertools.count(39101)


def cluster_metadata(brokers: tuple[int, ...] = (2, 1), controller: int = 1, cluster_id: str | None = CLUSTER_ID,
                     answered_by: int = -1, at: dict[int, int] | None = None) -> ClusterMetadata:
    """Topic orders: partition 0 led by 1 with ISR [1] of [1, 2], partition 1 offline (no leader, empty ISR).

    Broker b listens on 127.0.0.1:``at[b]`` (default 19090 + b); ``answered_by`` -1: the bootstrap connection.
    """
    md = ClusterMetadata()
    md.cluster_id, md.controller_id, md.orig_broker_id = cluster_id, controller, answered_by
    for b in brokers:
        bm = BrokerMetadata()
        bm.id, bm.host, bm.port = b, "127.0.0.1", (at or {}).get(b, 19090 + b)
        md.brokers[b] = bm
    t = TopicMetadata()
    t.topic = "orders"
    for pid, leader, isr in ((1, -1, []), (0, 1, [1])):
        p = PartitionMetadata()
        p.id, p.leader, p.replicas, p.isrs = pid, leader, [2, 1], isr
        t.partitions[pid] = p
    md.topics["orders"] = t
    return md


def described(controller: int = 3, cluster_id: str = CLUSTER_ID) -> DescribeClusterResult:
    nodes = [Node(i, "logger", 9092) for i in (1, 2, 3)]
    return DescribeClusterResult(nodes[controller - 1], nodes, cluster_id)


class FakeAdmin:
    """An AdminClient stand-in: ``behaviour`` is answer, hang, dead or refuse; ``destroy`` seconds in __del__."""

    def __init__(self, behaviour: str, conf: dict[str, Any], md: ClusterMetadata, cluster: Any,
                 destroy: float) -> None:
        self.behaviour, self.conf, self.md, self.cluster, self.destroy = behaviour, conf, md, cluster, destroy
        # librdkafka refuses a client whose settings are out of range (rd_kafka_new: _INVALID_ARG).
        floors = {"socket.timeout.ms": 10, "socket.connection.setup.timeout.ms": 1000}
        low = {k: conf[k] for k, v in floors.items() if k in conf and conf[k] < v}
        if low:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"out of range: {low}"))
        # What librdkafka reports through error_cb at once (served by poll()), while list_topics() waits.
        self.pending: list[KafkaError] = {
            "dead": [KafkaError(KafkaError._TRANSPORT, f"{conf['bootstrap.servers']}/bootstrap: Connect to ipv4#"
                                f"{conf['bootstrap.servers']} failed: Connection refused (after 0ms in state CONNECT)"),
                     KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")],
            "refuse": [KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed"
                                  " during authentication due to invalid credentials with SASL mechanism SCRAM")],
        }.get(behaviour, [])

    def list_topics(self, timeout: float) -> ClusterMetadata:
        if self.behaviour != "answer":
            time.sleep(timeout)  # librdkafka waits the whole timeout, whatever error_cb has said
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))
        return self.md

    def describe_cluster(self, request_timeout: float) -> cf.Future[Any]:
        f: cf.Future[Any] = cf.Future()
        if self.cluster is not None:
            f.set_result(self.cluster)
        return f  # None: the controller never answers

    def poll(self, timeout: float) -> int:
        for e in self.pending:
            self.conf["error_cb"](e)
        n, self.pending = len(self.pending), []
        return n

    def __del__(self) -> None:
        time.sleep(self.destroy)


@contextmanager
def fake_broker(behaviour: str = "answer", *, md: ClusterMetadata | list[ClusterMetadata] | None = None,
                cluster: Any = "default",
                destroy: float = 0.0, made: list[dict[str, Any]] | None = None,
                port: int | None = None) -> Iterator[int]:
    """A broker on 127.0.0.1:<port> as kctl.kafka.describe sees it, through the client factory; yields the port.

    ``md``: its answer, or one answer per client made (the last repeats). Nested fake brokers chain: a
    client bootstrapped with another address goes to the enclosing one.
    """
    port = port or next(_ports)
    previous: Callable[..., Any] = client.admin
    answers = md if isinstance(md, list) else [md if md is not None else cluster_metadata()]
    desc = described() if cluster == "default" else cluster

    def admin(target: client.Target, **extra: Any) -> Any:
        if target.bootstrap_servers != f"127.0.0.1:{port}":
            return previous(target, **extra)
        conf = {**client.base_config(target), **extra}
        if made is not None:
            made.append(conf)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return FakeAdmin(behaviour, conf, answer, desc, destroy)

    with mock.patch.object(client, "admin", admin):
        yield port


def test_mapping_of_librdkafka_answers() -> None:
    md = kmd.from_results(cluster_metadata(answered_by=2), described(controller=3), "127.0.0.1:19091")
    assert md.brokers == (1, 2) and md.cluster_id == CLUSTER_ID
    assert md.controller == 3  # DescribeCluster's controller wins over the answering broker's view
    assert (md.broker, md.answered_by) == (2, "127.0.0.1:19092")  # librdkafka asked broker 2, not the address
    assert [(p.topic, p.partition, p.leader, p.replicas, p.isr, p.under_replicated) for p in md.partitions] == [
        ("orders", 0, 1, (2, 1), (1,), True), ("orders", 1, -1, (2, 1), (), True)]
    boot = kmd.from_results(cluster_metadata(), None, "127.0.0.1:19091")  # the bootstrap connection answered
    assert (boot.broker, boot.answered_by, boot.controller) == (1, "127.0.0.1:19091", 1)  # its own controller
    own = kmd.from_results(cluster_metadata(controller=-1, cluster_id=None), None, "h:1")
    assert own.controller is None and own.cluster_id is None and (own.broker, own.answered_by) == (None, "h:1")
    healthy = kmd.Partition("t", 0, 1, (1, 2), (2, 1))
    assert not healthy.under_replicated


def test_fetch_asks_through_the_factory_with_the_security_settings_and_bounded_sockets() -> None:
    made: list[dict[str, Any]] = []
    settings = {"security.protocol": "SASL_SSL", "sasl.username": "admin", "sasl.password": "pw"}
    with fake_broker(made=made) as port:
        md = kmd.fetch_any(f"127.0.0.1:{port}", timeout=1.5, settings=settings)
    assert md.controller == 3 and md.brokers == (1, 2)
    conf = made[0]
    assert conf["bootstrap.servers"] == f"127.0.0.1:{port}"
    assert conf["sasl.password"] == "pw" and conf["security.protocol"] == "SASL_SSL"
    assert 1400 <= conf["socket.timeout.ms"] <= 1500 and 1400 <= conf["socket.connection.setup.timeout.ms"] <= 1500
    made.clear()
    with fake_broker(made=made) as port:  # a short budget, within librdkafka's floors
        assert kmd.fetch(f"127.0.0.1:{port}", timeout=0.5, settings=settings).cluster_id == CLUSTER_ID
    assert made[0]["socket.timeout.ms"] <= 500 and made[0]["socket.connection.setup.timeout.ms"] == 1000


def test_the_first_answer_wins_and_a_paused_broker_costs_nothing() -> None:
    with fake_broker("hang") as hung, fake_broker("dead") as dead, fake_broker() as live:
        started = time.monotonic()
        md = kmd.fetch_any(f"127.0.0.1:{hung},127.0.0.1:{dead},127.0.0.1:{live}", timeout=2)
        assert time.monotonic() - started < 1.0
    assert md.answered_by == f"127.0.0.1:{live}"
    with fake_broker("hang") as hung, fake_broker("dead") as dead, pytest.raises(kmd.MetadataError) as ei:
        started = time.monotonic()
        kmd.fetch_any(f"127.0.0.1:{hung},127.0.0.1:{dead}", timeout=0.5)
    assert time.monotonic() - started < 0.5 + kmd.GRACE + 0.3
    assert "no metadata answer" in str(ei.value) and not isinstance(ei.value, kmd.AuthError)


def test_a_healthy_first_broker_is_the_only_one_asked() -> None:
    made: list[dict[str, Any]] = []
    with fake_broker(made=made) as second, fake_broker(made=made) as first:
        assert kmd.fetch_any(f"127.0.0.1:{first},127.0.0.1:{second}", timeout=2).answered_by == f"127.0.0.1:{first}"
    assert [c["bootstrap.servers"] for c in made] == [f"127.0.0.1:{first}"]


def test_without_describe_the_answering_brokers_metadata_gives_id_and_controller() -> None:
    with fake_broker() as port:  # DescribeCluster would say controller 3
        md = kmd.fetch_any(f"127.0.0.1:{port}", timeout=1.0, describe=False)
    assert (md.controller, md.cluster_id) == (1, CLUSTER_ID)


def test_a_silent_controller_leaves_the_answering_brokers_view() -> None:
    with fake_broker(cluster=None) as port:
        started = time.monotonic()
        md = kmd.fetch_any(f"127.0.0.1:{port}", timeout=3.0)
    assert md.controller == 1 and md.cluster_id == CLUSTER_ID  # from the broker's own Metadata answer
    assert time.monotonic() - started < kmd.DESCRIBE_WAIT + 0.4  # not the 3 s budget


def test_a_client_slow_to_destroy_does_not_hold_the_caller() -> None:
    with fake_broker(destroy=3.0) as port:
        started = time.monotonic()
        assert kmd.fetch_any(f"127.0.0.1:{port}", timeout=1.0).cluster_id == CLUSTER_ID
        assert time.monotonic() - started < 1.0


def test_refused_credentials_are_an_auth_error_said_at_once() -> None:
    started = time.monotonic()
    with fake_broker("refuse") as port, pytest.raises(kmd.AuthError) as ei:
        kmd.fetch_any(f"127.0.0.1:{port}", timeout=2.0, settings={"sasl.password": "wrong"})
    assert time.monotonic() - started < 1.0
    assert "invalid credentials" in str(ei.value) and "wrong" not in str(ei.value)


def test_a_refused_connection_fails_at_once_not_after_the_timeout() -> None:
    with fake_broker("dead") as one, fake_broker("dead") as two, pytest.raises(kmd.MetadataError) as ei:
        started = time.monotonic()
        kmd.fetch_any(f"127.0.0.1:{one},127.0.0.1:{two}", timeout=2.0)
    assert time.monotonic() - started < 1.0
    assert "Connection refused" in str(ei.value) and f"127.0.0.1:{one}" in str(ei.value)


def test_fetch_each_gives_every_brokers_own_view_and_names_the_silent_ones() -> None:
    one, three, hung = next(_ports), next(_ports), next(_ports)
    at = {1: one, 3: three}
    # The client bootstrapped with broker 3's address is answered by broker 1 first: it asks again.
    misrouted = cluster_metadata(brokers=(1, 3), controller=1, answered_by=1, at=at)
    with fake_broker(md=cluster_metadata(brokers=(1, 2, 3), controller=1, at=at), port=one), \
            fake_broker(md=[misrouted, cluster_metadata(brokers=(1, 3), controller=3, at=at)], port=three), \
            fake_broker("hang", port=hung):
        # the hung broker is waited for this long: long enough for the live ones on a loaded machine
        views, errors = kmd.fetch_each(f"127.0.0.1:{one},127.0.0.1:{three},127.0.0.1:{hung}", timeout=3.0)
    by = {(v.answered_by, v.broker): (v.brokers, v.controller) for v in views}
    # Each broker's own controller, not DescribeCluster's (which the controller answers for all).
    assert by == {(f"127.0.0.1:{one}", 1): ((1, 2, 3), 1), (f"127.0.0.1:{three}", 3): ((1, 3), 3)}
    assert len(errors) == 1 and errors[0].startswith(f"127.0.0.1:{hung}: no metadata answer")


def test_fetch_each_never_takes_another_brokers_answer_for_its_own() -> None:
    port = next(_ports)
    with fake_broker(md=cluster_metadata(answered_by=2, at={1: port}), port=port):
        views, errors = kmd.fetch_each(f"127.0.0.1:{port}", timeout=2.0)
        assert views == [] and "no answer of its own" in errors[0] and "127.0.0.1:19092" in errors[0]
        assert kmd.fetch_any(f"127.0.0.1:{port}", timeout=3.0).broker == 2  # any answer will do


def test_addresses_default_the_host() -> None:
    assert kmd.addresses(":9092, logger1:19092") == ["127.0.0.1:9092", "logger1:19092"]
