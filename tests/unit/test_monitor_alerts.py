"""kctl.monitor.alerts: an alert opens after its threshold, repeats at its interval, closes with its duration,
and a restart from the stored state neither opens it again nor forgets it."""

from __future__ import annotations

from kctl.monitor.alerts import Notification, Rule, Tracker

URP = ("under-replicated", "orders-0")
RULES = {"under-replicated": Rule("under-replicated", threshold=30, repeat=600),
         "offline-partitions": Rule("offline-partitions", threshold=0, repeat=0, send_close=False)}


def kinds(notes: list[Notification]) -> list[tuple[str, str, str]]:
    return [(n.kind, n.rule, n.subject) for n in notes]


def test_opens_after_its_threshold_once_repeats_at_its_interval_and_closes_with_its_duration() -> None:
    t = Tracker(RULES)
    assert t.observe(100, {URP: "ISR [1, 3] of [1, 2, 3]"}) == []  # pending: 0 s of 30
    assert t.observe(129, {URP: "ISR [1, 3] of [1, 2, 3]"}) == []
    opened = t.observe(130, {URP: "ISR [1] of [1, 2, 3]"})
    assert kinds(opened) == [("open", *URP)] and opened[0].details == "ISR [1] of [1, 2, 3]"
    assert t.observe(131, {URP: "x"}) == [] and t.observe(729, {URP: "x"}) == []  # exactly once until the repeat
    assert kinds(t.observe(730, {URP: "x"})) == [("repeat", *URP)]
    assert t.observe(731, {URP: "x"}) == []
    closed = t.observe(800, {})
    assert kinds(closed) == [("resolved", *URP)]
    body = closed[0].to_json("logger")
    assert body["state"] == "resolved" and body["cluster"] == "logger" and body["subject"] == "orders-0"
    assert body["opened_at"] == 130 and body["closed_at"] == 800 and body["duration_seconds"] == 670
    assert t.open_alerts() == [] and t.observe(801, {}) == []


def test_a_condition_that_clears_before_its_threshold_tells_nobody_and_starts_afresh() -> None:
    t = Tracker(RULES)
    t.observe(100, {URP: "x"})
    assert t.observe(120, {}) == []  # never opened: no close either
    assert t.observe(125, {URP: "x"}) == []
    assert t.observe(150, {URP: "x"}) == []  # 25 s of this new stretch, not 50 since the first
    assert kinds(t.observe(155, {URP: "x"})) == [("open", *URP)]


def test_no_threshold_opens_at_once_no_repeat_and_no_close_when_the_rule_says_so() -> None:
    t = Tracker(RULES)
    off = ("offline-partitions", "orders-2")
    note = t.observe(10, {off: "no leader"})
    assert kinds(note) == [("open", *off)] and note[0].to_json("c")["state"] == "open"
    assert t.observe(100000, {off: "no leader"}) == []
    assert t.observe(100001, {}) == []
    assert t.observe(5, {("unknown-rule", "x"): "?"}) == []  # a rule that is turned off is not tracked


def test_several_subjects_in_one_observation_opens_first_then_repeats_then_closes() -> None:
    t = Tracker({"r": Rule("r", threshold=0, repeat=10)})
    t.observe(0, {("r", "a"): "", ("r", "b"): ""})
    got = t.observe(10, {("r", "b"): "", ("r", "c"): ""})
    assert kinds(got) == [("open", "r", "c"), ("repeat", "r", "b"), ("resolved", "r", "a")]


def test_a_restart_from_the_stored_state_neither_opens_again_nor_forgets() -> None:
    t = Tracker(RULES)
    t.observe(100, {URP: "x"})
    t.observe(130, {URP: "x"})
    again = Tracker(RULES)
    again.restore(t.state())
    assert [a.key for a in again.open_alerts()] == [URP]
    assert again.observe(200, {URP: "x"}) == []  # open already: no second "open"
    assert kinds(again.observe(730, {URP: "x"})) == [("repeat", *URP)]  # the repeat clock survived
    assert kinds(again.observe(731, {})) == [("resolved", *URP)]
