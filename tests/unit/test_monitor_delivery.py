"""The monitor loses no alert and sends none twice or elsewhere: a round the store cannot record (a locked
database, a full disk) is made again by the next one, whose notification is delivered once; a notification a
receiver refuses blocks none behind it and ends failed with a log line; a receiver that is down, or refuses kctl
itself (401, 403, 404: a rotated token, a wrong URL), keeps its queue in order with a back-off; queued
notifications stay with their notifier by name, across a reordered kctl.yaml and an old store's migration; a
notification past the retention is given up with a log line. Real SQLite files and real HTTP receivers on
127.0.0.1."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kctl.monitor import service
from kctl.monitor.lag import Sample
from kctl.monitor.service import Monitor
from kctl.monitor.store import Store, db_path
from tests.unit.monitor_receivers import Hook, group_doc, hooks, monitor


def stop_billing(mon: Monitor) -> None:
    """The next round sees group billing STOPped, with one new sample of it to store."""
    mon.group_docs = {"billing": group_doc("STOP")}
    with mon.lock:
        mon.pending.setdefault("billing", []).append((("t", 0), Sample(7, 7000, 40), 47))


def open_alerts(path: Path) -> list[dict[str, Any]]:
    s = Store(path, readonly=True)
    try:
        return [a for a in s.alert_rows() if a.get("opened") is not None]
    finally:
        s.close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    with hooks(1) as (h,):
        yield h


def test_a_round_the_locked_store_cannot_record_is_made_again_and_its_alert_delivered_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook) -> None:
    lines: list[str] = []
    mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": hook.url()}], lines, store_timeout_s=0.2)
    path = db_path(mon.state_dir)
    stop_billing(mon)
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # another writer holds the lock past the busy timeout
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        mon.round(with_groups=False)
    assert mon.tracker.open_alerts() == [] and mon.rounds == 0  # memory did not move ahead of the store
    assert [len(rows) for rows in mon.pending.values()] == [1]  # the round's sample waits for the next one
    locker.execute("ROLLBACK")
    locker.close()

    notes = mon.round(with_groups=False)
    assert [(n.kind, n.subject) for n in notes] == [("open", "group billing")]
    assert [a["subject"] for a in open_alerts(path)] == ["group billing"]
    r = Store(path, readonly=True)
    assert [x[2].offset for x in r.last_samples(10)] == [7] and len(r.outbox()) == 1
    r.close()
    assert mon.deliver_once(mon.store) == 1
    assert mon.round(with_groups=False) == [] and mon.deliver_once(mon.store) == 0
    assert [(b["alert"], b["state"], b["subject"]) for b in hook.bodies()] == [
        ("group-status", "open", "group billing")]  # exactly once

    # The same for the close: the resolved notification is not lost with a failed round either.
    mon.group_docs = {"billing": group_doc("OK", 0)}
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError):
        mon.round(with_groups=False)
    locker.execute("ROLLBACK")
    locker.close()
    assert [n.kind for n in mon.round(with_groups=False)] == ["resolved"]
    mon.deliver_once(mon.store)
    assert [b["state"] for b in hook.bodies()] == ["open", "resolved"]
    mon.store.close()


def test_a_full_disk_fails_the_round_whole_and_the_alert_goes_out_after_recovery(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook) -> None:
    mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": hook.url()}])
    # SQLite's own "database or disk is full" (SQLITE_FULL): the file may grow by no page.
    pages = mon.store.db.execute("PRAGMA page_count").fetchone()[0]
    mon.store.db.execute(f"PRAGMA max_page_count = {pages}")
    stop_billing(mon)
    with mon.lock:  # a round with more samples than the pages' free room
        mon.pending["billing"].extend((("t", p), Sample(7, 7000, 40), 47) for p in range(1, 500))
    with pytest.raises(sqlite3.OperationalError, match="full"):
        mon.round(with_groups=False)
    assert mon.tracker.open_alerts() == [] and open_alerts(db_path(mon.state_dir)) == []
    mon.store.db.execute("PRAGMA max_page_count = 1073741823")  # space again
    assert [n.kind for n in mon.round(with_groups=False)] == ["open"]
    assert mon.deliver_once(mon.store) == 1 and len(hook.bodies()) == 1
    mon.store.close()


def _mount_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    where.mkdir(parents=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_a_real_full_file_system_under_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook) -> None:
    fs = tmp_path / "small"
    if not _mount_tmpfs(fs, "2m"):
        pytest.skip("needs root and tmpfs (the page-count test above covers SQLite's full-disk path)")
    lines: list[str] = []
    try:
        mon = monitor(fs, monkeypatch, [{"type": "webhook", "url": hook.url()}], lines)
        mon.round(with_groups=False)  # the store made, while there is room
        filler = fs / "filler"
        with filler.open("wb") as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        stop_billing(mon)
        # A few rounds until SQLite runs out of the room its WAL had (it may have some pages spare).
        failed = 0
        for _ in range(50):
            mon.group_docs = {"billing": group_doc("STOP")}
            with mon.lock:
                mon.pending.setdefault("billing", []).extend(
                    (("t", p), Sample(7, 7000, 40), 47) for p in range(2000))
            try:
                mon.round(with_groups=False)
            except sqlite3.OperationalError:
                failed += 1
                break
            mon.tracker.restore([])  # not what is tested here: start the alert over
            with mon.store.round():
                mon.store.db.execute("DELETE FROM outbox")
        assert failed == 1, "the file system never filled"
        assert mon.tracker.open_alerts() == []
        filler.unlink()
        assert [n.kind for n in mon.round(with_groups=False)] == ["open"]
        assert mon.deliver_once(mon.store) == 1 and [b["state"] for b in hook.bodies()] == ["open"]
        mon.store.close()
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)


def test_a_refused_notification_blocks_none_behind_it_and_ends_failed_with_a_log_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook) -> None:
    hook.answer = lambda m, p, body: (400, {}) if body and body["subject"] == "poison" else (200, {})
    lines: list[str] = []
    mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": hook.url()}], lines)
    key = mon.spec.monitoring.notifiers[0].key
    with mon.store.round():
        for subject in ("first", "poison", "second"):
            mon.store.enqueue(key, {"alert": "disk", "state": "open", "subject": subject})
    t = 1_000_000.0
    mon.spec = mon.spec.model_copy(update={"monitoring": mon.spec.monitoring.model_copy(
        update={"retention_hours": 24 * 366})})  # nothing here is old enough to expire
    assert mon.deliver_once(mon.store, now=t) == 2
    assert [b["subject"] for b in hook.bodies()] == ["first", "poison", "second"]
    row = mon.store.outbox()[0]
    assert row["permanent"] and row["attempts"] == 1 and "HTTP 400" in row["last_error"]
    assert service.BACKOFF_BASE_S / 2 <= row["next_at"] - t <= service.BACKOFF_BASE_S

    with mon.store.round():
        mon.store.enqueue(key, {"alert": "disk", "state": "open", "subject": "third"})
    assert mon.deliver_once(mon.store, now=t + 0.5) == 1  # the refused one waits its delay; the new one goes
    assert [b["subject"] for b in hook.bodies()][-1] == "third" and len(hook.bodies()) == 4
    for i in range(1, service.MAX_REFUSALS):
        mon.deliver_once(mon.store, now=t + 1000 * i)
    assert len(hook.bodies()) == 3 + service.MAX_REFUSALS
    (row,) = mon.store.outbox()
    assert row["state"] == "failed" and row["attempts"] == service.MAX_REFUSALS
    assert any("given up, refused 3 times" in line and "poison" in line for line in lines)
    mon.deliver_once(mon.store, now=t + 10_000)
    assert len(hook.bodies()) == 3 + service.MAX_REFUSALS  # a failed one is not tried again ...
    with mon.store.round():
        assert mon.store.retry_failed() == 1  # ... until `kctl alerts --retry-failed`
    hook.answer = lambda m, p, body: (200, {})
    assert mon.deliver_once(mon.store, now=t + 10_001) == 1 and mon.store.outbox() == []
    mon.store.close()


def test_a_receiver_that_is_down_keeps_its_queue_in_order_with_a_growing_delay(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook) -> None:
    hook.answer = lambda m, p, body: (503, {})
    # The jitter at its top (each delay whole): sampled on a coarse grid, a drawn jitter can make one gap look
    # shorter than the one before; the jitter itself is test_backoff_doubles_up_to_its_cap_with_jitter's.
    whole = service.backoff
    monkeypatch.setattr(service, "backoff", lambda attempts: whole(attempts, rng=lambda: 1.0))
    mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": hook.url()}])
    key = mon.spec.monitoring.notifiers[0].key
    with mon.store.round():
        for subject in ("a", "b", "c"):
            mon.store.enqueue(key, {"alert": "disk", "state": "open", "subject": subject})
    t = mon.store.outbox()[0]["created"]
    tries = []
    for dt in (0, 0.5, 1.5, 3, 5, 9, 13, 20, 30):  # 30 s: the head tried a few times, with growing gaps
        before = len(hook.requests)
        mon.deliver_once(mon.store, now=t + dt)
        if len(hook.requests) > before:
            tries.append(dt)
    assert [b["subject"] for b in hook.bodies()] == ["a"] * len(tries)  # b and c never overtook a
    assert 3 <= len(tries) <= 6 and tries[0] == 0
    gaps = [b - a for a, b in zip(tries, tries[1:], strict=False)]
    assert gaps == sorted(gaps) and gaps[-1] >= 4  # each wait at least as long as the one before
    head = mon.store.outbox()[0]
    assert head["attempts"] == len(tries) and not head["permanent"] and head["state"] == "pending"
    hook.answer = lambda m, p, body: (200, {})
    assert mon.deliver_once(mon.store, now=t + 3600) == 3
    assert [b["subject"] for b in hook.bodies()][-3:] == ["a", "b", "c"]
    mon.store.close()


@pytest.mark.parametrize("status", [401, 403, 404, 405, 407, 410])
def test_a_receiver_that_refuses_kctl_itself_is_down_not_a_refusal_of_each_notification(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook, status: int) -> None:
    """A rotated token or a wrong URL refuses every notification alike: the queue waits in order with back-off,
    nothing is marked failed however long it lasts, and all of it goes out once the receiver is fixed."""
    hook.answer = lambda m, p, body: (status, {})
    lines: list[str] = []
    mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": hook.url()}], lines)
    key = mon.spec.monitoring.notifiers[0].key
    with mon.store.round():
        for subject in ("a", "b", "c"):
            mon.store.enqueue(key, {"alert": "disk", "state": "open", "subject": subject})
    t = mon.store.outbox()[0]["created"]
    for dt in range(0, 3600, 7):  # an hour of passes every 7 s
        mon.deliver_once(mon.store, now=t + dt)
    assert {b["subject"] for b in hook.bodies()} == {"a"}  # b and c never overtook a
    tries = len(hook.bodies())
    assert 8 <= tries <= 40, tries  # delays growing to 150-300 s: not a try in each of the 515 passes
    rows = mon.store.outbox()
    assert [(r["body"]["subject"], r["state"], r["refusals"], r["permanent"]) for r in rows] == [
        ("a", "pending", 0, False), ("b", "pending", 0, False), ("c", "pending", 0, False)]
    assert f"HTTP {status}" in rows[0]["last_error"] and "the receiver refuses kctl" in rows[0]["last_error"]
    assert not any("given up" in line for line in lines)
    hook.answer = lambda m, p, body: (200, {})  # the token replaced
    with mon.store.round():
        mon.store.enqueue(key, {"alert": "disk", "state": "resolved", "subject": "a"})
    assert mon.deliver_once(mon.store, now=t + 7200) == 4 and mon.store.outbox() == []
    assert [(b["subject"], b["state"]) for b in hook.bodies()][tries:] == [
        ("a", "open"), ("b", "open"), ("c", "open"), ("a", "resolved")]
    mon.store.close()


@pytest.mark.parametrize("status", [400, 413, 415, 422])
def test_a_refusal_of_one_notifications_body_sets_it_aside_and_the_later_ones_are_delivered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook, status: int) -> None:
    hook.answer = lambda m, p, body: (status, {}) if body and body["subject"] == "poison" else (200, {})
    mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": hook.url()}])
    mon.spec = mon.spec.model_copy(update={"monitoring": mon.spec.monitoring.model_copy(
        update={"retention_hours": 24 * 366})})
    key = mon.spec.monitoring.notifiers[0].key
    with mon.store.round():
        for subject in ("poison", "later"):
            mon.store.enqueue(key, {"alert": "disk", "state": "open", "subject": subject})
    t = 1_000_000.0
    assert mon.deliver_once(mon.store, now=t) == 1
    with mon.store.round():
        mon.store.enqueue(key, {"alert": "disk", "state": "open", "subject": "after"})
    assert mon.deliver_once(mon.store, now=t + 0.5) == 1  # the refused one waits its delay, the next goes
    for i in range(1, service.MAX_REFUSALS):
        mon.deliver_once(mon.store, now=t + 1000 * i)
    (row,) = mon.store.outbox()
    assert row["body"]["subject"] == "poison" and row["state"] == "failed" and row["refusals"] == service.MAX_REFUSALS
    assert [b["subject"] for b in hook.bodies() if b["subject"] != "poison"] == ["later", "after"]
    mon.store.close()


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    low, high = (lambda: 0.0), (lambda: 1.0)
    assert [service.backoff(n, high) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 16.0]
    assert [service.backoff(n, low) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert service.backoff(40, high) == service.BACKOFF_CAP_S and service.backoff(10_000, low) == 150.0


def test_an_expired_notification_is_given_up_with_a_log_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             hook: Hook) -> None:
    lines: list[str] = []
    mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": hook.url()}], lines)
    key = mon.spec.monitoring.notifiers[0].key
    now = 2_000_000_000.0
    with mon.store.round():
        mon.store.enqueue(key, {"alert": "disk", "state": "open", "subject": "old"}, created=now - 25 * 3600)
        mon.store.failed(mon.store.outbox()[0]["id"], "HTTP 503", next_at=now + 60)
        mon.store.enqueue(key, {"alert": "disk", "state": "open", "subject": "new"}, created=now - 60)
    assert mon.deliver_once(mon.store, now=now) == 1
    assert [b["subject"] for b in hook.bodies()] == ["new"] and mon.store.outbox() == []
    (line,) = [x for x in lines if "given up after 24 h" in x]
    assert "1 attempt(s)" in line and "old" in line and "HTTP 503" in line
    mon.store.close()


def test_queued_notifications_stay_with_their_notifier_across_a_reordered_kctl_yaml(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with hooks(2) as (a, b):
        down = lambda m, p, body: (503, {})  # noqa: E731
        a.answer = b.answer = down
        lines: list[str] = []
        first = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": a.url("/a")},
                                                {"type": "webhook", "url": b.url("/b")}], lines)
        stop_billing(first)
        first.round(with_groups=False)
        first.store.close()
        a.answer = b.answer = lambda m, p, body: (200, {})
        # kctl.yaml reordered, and a third notifier added in front: each queued one still goes to its own.
        with hooks(1) as (c,):
            again = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": c.url("/c")},
                                                    {"type": "webhook", "url": b.url("/b")},
                                                    {"type": "webhook", "url": a.url("/a")}], lines)
            assert again.deliver_once(again.store) == 2
            assert c.requests == []
        assert [p for _, p, _ in a.requests] == ["/a"] and [p for _, p, _ in b.requests] == ["/b"]
        again.store.close()

        # A notifier that left kctl.yaml: its notifications are reported, never sent to another.
        a.requests.clear()
        b.requests.clear()
        third = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": a.url("/a"), "name": "pager"},
                                                {"type": "webhook", "url": b.url("/b")}], lines)
        third.group_docs = {"billing": group_doc("OK")}
        third.round(with_groups=False)  # resolved: one for each
        third.store.close()
        fourth = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": b.url("/b")}], lines)
        assert fourth.deliver_once(fourth.store) == 1
        assert [body["state"] for _, _, body in b.requests] == ["resolved"] and a.requests == []
        assert any("queued for notifier 'pager', which kctl.yaml no longer has" in line for line in lines)
        assert [o["notifier"] for o in fourth.store.outbox()] == ["pager"]
        fourth.store.close()


OLD_OUTBOX = """CREATE TABLE outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT, notifier INTEGER NOT NULL, body TEXT NOT NULL,
  created REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT);"""


def test_an_old_store_s_outbox_is_migrated_to_notifier_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            hook: Hook) -> None:
    path = db_path(tmp_path / "state")
    path.parent.mkdir(parents=True)
    old = sqlite3.connect(path)
    old.executescript(OLD_OUTBOX)
    old.executemany("INSERT INTO outbox (notifier, body, created, attempts, last_error) VALUES (?, ?, ?, ?, ?)",
                    [(0, '{"subject": "zero"}', 1.0, 2, "webhook https://hooks.example.org/T0KEN/x: HTTP 500"),
                     (1, '{"subject": "one"}', 2.0, 0, None), (5, '{"subject": "five"}', 3.0, 0, None)])
    old.commit()
    old.close()
    r = Store(path, readonly=True)  # `kctl alerts` before the monitor migrated it
    assert [(o["notifier"], o["body"]["subject"]) for o in r.outbox()] == [("#0", "zero"), ("#1", "one"),
                                                                            ("#5", "five")]
    r.close()
    lines: list[str] = []
    mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": hook.url("/h0"), "name": "first"},
                                          {"type": "webhook", "url": hook.url("/h1"), "name": "second"}], lines)
    got = [(o["notifier"], o["body"]["subject"], o["attempts"], o["last_error"]) for o in mon.store.outbox()]
    assert got == [("first", "zero", 2, "webhook https://hooks.example.org/…: HTTP 500"),
                   ("second", "one", 0, None), ("#5", "five", 0, None)]
    assert any("3 queued notification(s) of an older store" in line for line in lines)
    mon.spec = mon.spec.model_copy(update={"monitoring": mon.spec.monitoring.model_copy(
        update={"retention_hours": 24 * 366 * 100})})
    assert mon.deliver_once(mon.store, now=10.0) == 2
    assert sorted((p, body["subject"]) for _, p, body in hook.requests) == [("/h0", "zero"), ("/h1", "one")]
    mon.store.close()


def kctl_alerts(capsys: pytest.CaptureFixture[str], spec_file: Path, *args: str) -> tuple[int, str, str]:
    from kctl.cli.main import main

    capsys.readouterr()
    try:
        main(["alerts", "-f", str(spec_file), *args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_kctl_alerts_shows_pending_failed_and_orphaned_notifications_and_requeues_the_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], hook: Hook) -> None:
    hook.answer = lambda m, p, body: (400, {}) if body and body["subject"] == "poison" else (503, {})
    notifiers = [{"type": "webhook", "url": hook.url(), "name": "pager"}]
    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text(json.dumps({"name": "logger", "state_dir": str(tmp_path / "state"),
                                     "monitoring": {"notifiers": notifiers}}))
    mon = monitor(tmp_path, monkeypatch, notifiers)
    with mon.store.round():
        mon.store.enqueue("pager", {"alert": "disk", "state": "open", "subject": "poison"})
        mon.store.enqueue("pager", {"alert": "disk", "state": "open", "subject": "waits"})
        mon.store.enqueue("gone", {"alert": "disk", "state": "resolved", "subject": "orphan"})
    t = time.time()
    for i in range(service.MAX_REFUSALS):
        mon.deliver_once(mon.store, now=t + 1000 * i)
    mon.store.close()
    code, out, _ = kctl_alerts(capsys, spec_file, "-o", "json")
    assert code == 0
    got = {u["subject"]: (u["notifier"], u["delivery"]) for u in json.loads(out)["undelivered"]}
    assert got == {"poison": ("pager", "failed"), "waits": ("pager", "pending"), "orphan": ("gone", "no such notifier")}
    code, out, err = kctl_alerts(capsys, spec_file)
    table = out + err
    assert code == 0 and "1 not delivered yet (retried): pager: webhook pager" in table and "HTTP 503" in table
    assert "1 failed (refused; --retry-failed queues them again): pager:" in table and "HTTP 400" in table
    assert "1 for a notifier kctl.yaml no longer has (not sent): gone" in table
    code, out, err = kctl_alerts(capsys, spec_file, "--retry-failed", "-o", "json")
    assert code == 0 and "1 failed notification(s) queued again" in err
    assert {u["subject"]: u["delivery"] for u in json.loads(out)["undelivered"]}["poison"] == "pending"


def test_only_refusals_count_towards_failed_not_the_times_the_receiver_was_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook) -> None:
    answers = [503, 503, 503, 400, 400, 400]
    hook.answer = lambda m, p, body: (answers.pop(0), {})
    mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": hook.url()}])
    with mon.store.round():
        mon.store.enqueue(mon.spec.monitoring.notifiers[0].key, {"alert": "disk", "state": "open", "subject": "x"})
    t = mon.store.outbox()[0]["created"]
    states = []
    for i in range(6):
        mon.deliver_once(mon.store, now=t + 1000 * i)
        (row,) = mon.store.outbox()
        states.append((row["attempts"], row["refusals"], row["state"]))
    assert states == [(1, 0, "pending"), (2, 0, "pending"), (3, 0, "pending"), (4, 1, "pending"),
                      (5, 2, "pending"), (6, 3, "failed")]
    mon.store.close()


def test_the_running_monitor_says_a_round_was_not_recorded_and_delivers_the_alert_once_the_store_is_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook) -> None:
    """The real loop and delivery thread: a store locked for a few rounds, then free again."""
    import socket
    import threading

    from kctl.wait import wait_until

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    monkeypatch.setattr(service, "DELIVERY_PERIOD_S", 0.2)
    lines: list[str] = []
    made: list[Monitor] = []
    ready = threading.Event()

    def run() -> None:  # made on the thread that runs it, as `kctl monitor start` does (its SQLite connection)
        mon = monitor(tmp_path, monkeypatch, [{"type": "webhook", "url": hook.url()}], lines,
                      monitoring={"monitor_port": port}, interval_s=1, store_timeout_s=0.1)
        monkeypatch.setattr(mon, "groups_round", lambda: None)  # no Kafka here: the groups are the test's
        stop_billing(mon)
        made.append(mon)
        ready.wait(10)
        mon.run()

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    wait_until("the monitor made", lambda: (bool(made), ""), timeout=10, poll=0.02)
    mon = made[0]
    locker = sqlite3.connect(db_path(mon.state_dir), isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    ready.set()
    try:
        wait_until("a round not recorded", lambda: (any("round not recorded" in x for x in lines), str(lines[-3:])),
                   timeout=10, poll=0.05)
        assert hook.requests == [] and mon.tracker.open_alerts() == []
        locker.execute("ROLLBACK")
        wait_until("the alert delivered", lambda: (len(hook.bodies()) > 0, str(lines[-3:])), timeout=15, poll=0.05)
        rounds = mon.rounds
        wait_until("two more rounds", lambda: (mon.rounds >= rounds + 2, str(mon.rounds)), timeout=10, poll=0.05)
    finally:
        mon.stopping.set()
        runner.join(10)
        locker.close()
    assert [(b["alert"], b["state"]) for b in hook.bodies()] == [("group-status", "open")]
    (line,) = [x for x in lines if "round not recorded" in x][:1]
    assert "database is locked" in line and "made again by the next round" in line


def test_kctl_alerts_table_shows_a_hostile_group_id_escaped_and_json_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text(json.dumps({"name": "logger", "state_dir": str(tmp_path / "state")}))
    mon = monitor(tmp_path, monkeypatch, [])
    evil = "app\x1b[2J\nmonitor: all fine"
    mon.group_docs = {evil: group_doc("STOP")}
    mon.round(with_groups=False)
    mon.store.close()
    code, out, _ = kctl_alerts(capsys, spec_file, "-o", "json")
    assert code == 0 and json.loads(out)["open"][0]["subject"] == f"group {evil}"
    code, out, err = kctl_alerts(capsys, spec_file)
    assert code == 0 and "\x1b" not in out + err and "app\\x1b[2J\\nmonitor: all fine" in out
