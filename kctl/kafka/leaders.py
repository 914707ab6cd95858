"""Leader election through the AdminClient, and the min.insync.replicas each topic runs with."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import ClusterError, KctlError, UsageError
from kctl.kafka.client import REQUEST_TIMEOUT, Target, admin, error_code, kafka_error, require_topics

ELECTION_TYPES = ("preferred", "unclean")
ANSWER_MARGIN = 10.0  # seconds the election's future waits beyond the request timeout (socket.timeout.ms)
# The controller answers an election once the new leaders are in place (ZooKeeper written, LeaderAndIsr sent and
# acknowledged), which right after a broker's restart can take longer than an ordinary admin request's 15 s: a CI
# run's election timed out at 15 s on a busy machine. Kafka's own kafka-leader-election.sh waits 60 s (its
# default request timeout for the AdminClient); so does this.
ELECTION_TIMEOUT = 60.0


@dataclass
class ElectionResult:
    type: str
    scope: str  # "all partitions", "topic T" or "T-P"
    elected: list[str] = field(default_factory=list)  # partitions whose leader changed
    not_needed: int = 0  # partitions already led by their preferred (or a live in-sync) replica
    failed: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def elect(target: Target, election: str = "preferred", topic: str | None = None,
          partition: int | None = None, timeout: float = ELECTION_TIMEOUT) -> ElectionResult:
    """Elect leaders of every partition (or one topic's, or one partition) with Kafka's own election."""
    from confluent_kafka import ElectionType, KafkaException, TopicPartition

    if election not in ELECTION_TYPES:
        raise UsageError(f"unknown election type {election!r}", hint="preferred or unclean")
    if partition is not None and topic is None:
        raise UsageError("--partition needs --topic")
    a = admin(target, **{"socket.timeout.ms": int(timeout * 1000)})
    parts: list[Any] | None = None
    scope = "all partitions"
    if topic is not None:
        count = require_topics(target, [topic], client=a)[topic]
        if partition is not None:
            if not 0 <= partition < count:
                raise UsageError(f"topic {topic!r} has no partition {partition}",
                                 hint=f"its partitions are 0..{count - 1}")
            parts = [TopicPartition(topic, partition)]
            scope = f"{topic}-{partition}"
        else:
            parts = [TopicPartition(topic, p) for p in range(count)]
            scope = f"topic {topic}"
    kind = ElectionType.PREFERRED if election == "preferred" else ElectionType.UNCLEAN
    try:
        # No timeout keywords: confluent-kafka 2.16's C binding rejects every one of them ("more argument
        # specifiers than keyword list entries"); socket.timeout.ms of admin() bounds the request instead.
        # The future waits past socket.timeout.ms, so that a request the broker leaves unanswered ends as
        # librdkafka's own timeout (a KafkaException) rather than this wait's.
        answers = a.elect_leaders(kind, parts).result(timeout + ANSWER_MARGIN)
    except cf.TimeoutError:
        raise ClusterError(f"{election} leader election ({scope}): no answer from the controller in"
                           f" {timeout + ANSWER_MARGIN:.0f}s",
                           hint="it may still be carried out: see `kctl status`; run `kctl elect-leaders` again"
                           ) from None
    except KafkaException as exc:
        code, _msg = error_code(exc)
        if code == "ELECTION_NOT_NEEDED":
            return ElectionResult(election, scope, not_needed=len(parts or []))
        raise kafka_error(exc, f"{election} leader election ({scope})", topic=topic) from None
    result = ElectionResult(election, scope)
    for tp, err in sorted(answers.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        if err is None:
            result.elected.append(name)
            continue
        code, msg = _code(err)
        if code == "ELECTION_NOT_NEEDED":
            result.not_needed += 1
        else:
            result.failed.append({"partition": name, "error": f"{code}: {msg}" if code else msg})
    return result


def _code(err: Any) -> tuple[str, str]:
    # The per-partition answers are KafkaError values, not the KafkaException that error_code unwraps.
    if callable(getattr(err, "name", None)) and callable(getattr(err, "str", None)):
        return str(err.name()), str(err.str())
    return error_code(err)


def min_insync_replicas(target: Target, topics: Iterable[str], timeout: float = REQUEST_TIMEOUT) -> dict[str, int]:
    """{topic: the min.insync.replicas it runs with} (a topic override, else the broker's value)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    names = sorted(set(topics))
    if not names:
        return {}
    a = admin(target)
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in names]
    futs = a.describe_configs(resources, request_timeout=timeout)
    out: dict[str, int] = {}
    for res, fut in futs.items():
        try:
            entries = fut.result(timeout)
        except KafkaException as exc:
            if error_code(exc)[0] in ("UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"):
                continue  # deleted since the metadata was read
            raise kafka_error(exc, f"min.insync.replicas of topic {res.name}", topic=res.name) from None
        entry = entries.get("min.insync.replicas")
        if entry is not None and entry.value is not None:
            try:
                out[res.name] = int(entry.value)
            except ValueError as exc:
                raise KctlError(f"topic {res.name}: min.insync.replicas={entry.value!r} is not a number") from exc
    return out
