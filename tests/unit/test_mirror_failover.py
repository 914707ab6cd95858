"""kctl mirror failover's decision, from what it read (the checkpoints here, the group on the source, the replica
topics' partitions): refused while the group still consumes on the source or a partition it needs has no
checkpoint; a failed-over group leaves MirrorMaker's offset sync. tests/integration/test_mirror.py runs it
against two clusters and MirrorMaker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kctl.errors import KctlError
from kctl.kafka.client import Target
from kctl.mirror import config, failover, records, status
from kctl.mirror.config import Source
from kctl.mirror.failover import FailoverPlan, SourceView, Untranslated
from kctl.model.spec import ClusterSpec

SPEC = ClusterSpec.model_validate({"name": "dr", "mirrors": [{"name": "primary", "source": {
    "bootstrap_servers": "127.0.0.1:1"}, "topics": "orders|pay-.*", "topics_exclude": "pay-secret"}]})
MIRROR = SPEC.mirrors[0]


def cp(topic: str, partition: int, up: int, down: int) -> records.Checkpoint:
    return records.Checkpoint("billing", topic, partition, up, down, "")


CPS = {("primary.orders", 0): cp("primary.orders", 0, 100, 90), ("primary.orders", 1): cp("primary.orders", 1, 50, 48)}
PARTS = {"primary.orders": [0, 1, 2]}


def decide(src: SourceView, found: dict[tuple[str, int], records.Checkpoint] | None = None, *,
           force: bool = False, how: Untranslated = Untranslated.refuse,
           parts: dict[str, list[int]] | None = None) -> FailoverPlan:
    return failover.decide(MIRROR, "billing", CPS if found is None else found, src, PARTS if parts is None else parts,
                           {}, {("primary.orders", 2): 7}, force=force, untranslated=how,
                           fp=FailoverPlan("billing", "primary", "dr", False))


def test_a_group_stopped_on_the_source_with_every_partition_checkpointed_fails_over() -> None:
    src = SourceView(True, committed={("orders", 0): 100, ("orders", 1): 50})
    fp = decide(src)
    assert fp.refusals == [] and fp.untranslated == []
    assert [(m.topic, m.partition, m.translated, m.source_now, m.why) for m in fp.moves] == [
        ("primary.orders", 0, 90, 100, "checkpoint"), ("primary.orders", 1, 48, 50, "checkpoint")]
    # partition 2, never committed on the source, starts as it would have there: no loss, not refused


def test_live_members_on_the_source_refuse_with_the_figures_unless_forced() -> None:
    src = SourceView(True, members=["app-1@10.0.0.5", "app-2@10.0.0.6"], state="STABLE",
                     committed={("orders", 0): 130, ("orders", 1): 55})
    fp = decide(src)
    assert len(fp.refusals) == 1
    r = fp.refusals[0]
    assert "2 active member(s) on the source (app-1@10.0.0.5, app-2@10.0.0.6; state STABLE)" in r
    assert "35 record(s) past the checkpoints" in r  # (130 - 100) + (55 - 50)
    forced = decide(src, force=True)
    assert forced.refusals == [] and any(n.startswith("--force: group 'billing' has 2") for n in forced.notes)


def test_a_partition_committed_on_the_source_without_a_checkpoint_is_named() -> None:
    src = SourceView(True, committed={("orders", 0): 100, ("orders", 1): 50, ("orders", 2): 20,
                                      ("pay-in", 0): 3, ("pay-secret", 0): 9, ("other", 0): 1})
    fp = decide(src, parts={**PARTS, "primary.pay-in": [0]})
    assert fp.untranslated == ["primary.orders-2 (committed at 20 on the source, no checkpoint here)",
                               "primary.pay-in-0 (committed at 3 on the source, no checkpoint here)"]
    assert fp.refusals == ["2 partition(s) cannot be translated: " + "; ".join(fp.untranslated)]
    # a topic the mirror excludes, or does not copy at all, is not the failover's to translate
    assert not any("secret" in u or "other" in u for u in fp.untranslated)
    # --untranslated earliest: from its first offset here (where known), never skipped
    early = decide(src, how=Untranslated.earliest, parts={**PARTS, "primary.pay-in": [0]})
    assert [(m.topic, m.partition, m.translated, m.why) for m in early.moves if m.why != "checkpoint"] == [
        ("primary.orders", 2, 7, "earliest"), ("primary.pay-in", 0, None, "untranslated")]
    assert early.untranslated == ["primary.pay-in-0 (committed at 3 on the source, no checkpoint here)"]


def test_without_the_source_every_uncheckpointed_partition_of_a_replica_topic_is_unknown() -> None:
    fp = decide(SourceView(False, "127.0.0.1:1 did not answer"))
    assert fp.untranslated == ["primary.orders-2 (no checkpoint, and the source cannot say whether the group"
                               " committed there)"]
    assert any("the source was not asked (127.0.0.1:1 did not answer)" in n for n in fp.notes)
    assert fp.source_reachable is False
    whole = decide(SourceView(False, "gone"), parts={"primary.orders": [0, 1]})
    assert whole.refusals == [] and len(whole.moves) == 2


def test_a_checkpoints_topic_not_read_to_its_end_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Stuck:
        """A consumer that never gets past offset 0 of a partition whose end is 10."""

        def __init__(self, conf: dict[str, Any]) -> None:
            pass

        def list_topics(self, topic: str, timeout: float) -> Any:
            class T:
                error = None
                partitions = {0: None, 1: None}
            return type("MD", (), {"topics": {topic: T()}})()

        def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
            return 0, 10

        def assign(self, parts: Any) -> None:
            pass

        def consume(self, n: int, timeout: float) -> list[Any]:
            return []

        def position(self, tps: list[Any]) -> list[Any]:
            for tp in tps:
                tp.offset = 0
            return tps

        def close(self) -> None:
            pass

    import confluent_kafka

    monkeypatch.setattr(confluent_kafka, "Consumer", Stuck)
    here = Target.foreign("127.0.0.1:1", {})
    assert status.read_whole(here, "primary.checkpoints.internal", timeout=0.2) == []  # lenient: what it had
    with pytest.raises(KctlError) as err:
        status.read_whole(here, "primary.checkpoints.internal", timeout=0.2, strict=True)
    assert "partition(s) 0, 1 short of their end offsets" in err.value.message


def test_a_failed_over_group_leaves_mirrormakers_offset_sync(tmp_path: Path) -> None:
    assert failover.stop_sync(tmp_path, MIRROR, "billing.eu") is True
    assert failover.stop_sync(tmp_path, MIRROR, "billing.eu") is False  # recorded once
    assert config.failed_over(tmp_path, MIRROR) == ["billing.eu"]
    files, _ = config.render(SPEC, tmp_path, {"primary": Source("primary", Target.foreign("127.0.0.1:1", {}))})
    line = next(x for x in files["primary/conf/mm2.properties"].splitlines() if ".groups.exclude" in x)
    # matched literally: the dot is no wildcard, so billing-eu still syncs
    assert line.endswith(r"billing\\.eu"), line
    config.failed_over_path(tmp_path, MIRROR).write_text("{")
    with pytest.raises(KctlError, match="cannot be read"):
        config.failed_over(tmp_path, MIRROR)
    config.failed_over_path(tmp_path, MIRROR).write_text(json.dumps({"groups": ["a", "b"]}))
    assert config.failed_over(tmp_path, MIRROR) == ["a", "b"]


IDENTITY = ClusterSpec.model_validate({"name": "dr", "mirrors": [{"name": "primary", "policy": "identity", "source": {
    "bootstrap_servers": "127.0.0.1:1"}, "topics": "orders|pay-.*", "topics_exclude": "pay-secret"}]})


def test_identity_refuses_a_target_topic_of_the_same_name_that_mirrormaker_did_not_make() -> None:
    m = IDENTITY.mirrors[0]
    source = {"orders", "pay-in", "pay-secret", "other", "__consumer_offsets"}
    target = {"orders", "pay-in", "pay-secret", "other", "__consumer_offsets", "local"}
    # orders is MirrorMaker's (in its Connect offsets); pay-in is the target's own; pay-secret and other are not
    # copied; internal topics never are
    assert config.foreign_targets(m, source, target, {"orders"}) == ["pay-in"]
    assert config.foreign_targets(m, source, target, {"orders", "pay-in"}) == []
    assert config.foreign_targets(MIRROR, source, {f"primary.{t}" for t in source} | target, set()) == []  # prefix


def test_mirror_up_refuses_before_anything_is_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kctl.mirror import access, run

    class Admin:
        def __init__(self, names: set[str]) -> None:
            self.names = names

        def list_topics(self, timeout: float) -> Any:
            return type("MD", (), {"topics": {n: None for n in self.names}})()

    monkeypatch.setattr(run, "_reachable", lambda *a: None)
    monkeypatch.setattr(run, "admin", lambda target, **k: Admin(
        {"orders", "pay-in"} if target.bootstrap_servers == "127.0.0.1:1" else {"pay-in"}))
    monkeypatch.setattr(status, "replicated_offsets", lambda spec, m: {})
    provisioned: list[str] = []
    monkeypatch.setattr(access, "provision", lambda *a: provisioned.append("x"))
    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text("name: dr\n")
    with pytest.raises(KctlError) as err:
        run.up(IDENTITY, spec_file, tmp_path / "state")
    assert err.value.message.startswith("mirror primary refused, nothing was written: with policy identity it"
                                        " would write into 1 topic(s) of dr that MirrorMaker did not make (pay-in)")
    assert "topics_exclude" in (err.value.hint or "")
    assert provisioned == [] and not (tmp_path / "state").exists()
