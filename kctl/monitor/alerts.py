"""Alert states and when a person hears of them, as Burrow's notifier does it: an alert opens once its
condition has held for the rule's threshold, is sent again every ``repeat`` seconds while it stays open,
and is sent once more when it closes, with how long it was open.

Pure: :class:`Tracker` takes what the monitor found firing at one moment and returns the notifications due;
its state is plain data (:meth:`Tracker.state` / :meth:`Tracker.restore`), which the monitor keeps in its store so
that a restart neither opens an open alert again nor forgets one. :meth:`Tracker.step` computes a transition
without making it: the monitor writes the new state and its notifications in one transaction and
:meth:`Tracker.apply`-s the step only once that committed, so a round the store could not record is made again
by the next one (its notifications queued then), never half-made (an alert open in memory that nobody heard
of). Sending (webhook, e-mail) and retrying a notification that could not be sent are the notifiers' part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Rule:
    name: str  # offline-partitions, under-replicated, group-status, ...
    threshold: float = 0.0  # seconds the condition must hold before the alert opens
    repeat: float = 3600.0  # seconds between notifications while it stays open (0: never again)
    send_close: bool = True  # notify when it closes


@dataclass
class Alert:
    rule: str
    subject: str  # what it is about: "broker 2", "orders-0", "group app", "cluster"
    first_seen: float  # when the condition was first found holding (this time round)
    details: str = ""
    opened: float | None = None  # None while pending (condition holding, threshold not reached)
    last_sent: float | None = None
    closed: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.rule, self.subject


@dataclass(frozen=True)
class Notification:
    kind: str  # "open", "repeat" or "resolved"
    rule: str
    subject: str
    details: str
    opened: float
    at: float
    closed: float | None = None

    @property
    def state(self) -> str:
        """What the notification says the alert is: "open" (also when repeated) or "resolved"."""
        return "resolved" if self.kind == "resolved" else "open"

    def to_json(self, cluster: str) -> dict[str, Any]:
        out: dict[str, Any] = {"alert": self.rule, "state": self.state, "cluster": cluster, "subject": self.subject,
                               "details": self.details, "opened_at": self.opened, "sent_at": self.at,
                               "repeat": self.kind == "repeat"}
        if self.closed is not None:
            out["closed_at"] = self.closed
            out["duration_seconds"] = round(self.closed - self.opened, 3)
        return out


@dataclass(frozen=True)
class Step:
    """One observation's transition: the notifications due and the alert state after it."""

    notes: list[Notification]
    alerts: dict[tuple[str, str], Alert]

    def state(self) -> list[dict[str, Any]]:
        return [asdict(a) for a in sorted(self.alerts.values(), key=lambda a: a.key)]


@dataclass
class Tracker:
    rules: Mapping[str, Rule]
    alerts: dict[tuple[str, str], Alert] = field(default_factory=dict)

    def observe(self, now: float, firing: Mapping[tuple[str, str], str]) -> list[Notification]:
        """:meth:`step` and :meth:`apply` at once."""
        step = self.step(now, firing)
        self.apply(step)
        return step.notes

    def apply(self, step: Step) -> None:
        self.alerts = step.alerts

    def step(self, now: float, firing: Mapping[tuple[str, str], str]) -> Step:
        """``firing``: (rule, subject) -> details, for every condition that holds at ``now``. Returns the
        notifications due, opens before repeats before closes, each subject's in a stable order, and the state
        after them; the tracker itself is left as it was."""
        alerts = {k: replace(a) for k, a in self.alerts.items()}
        out: list[Notification] = []
        for key, details in sorted(firing.items()):
            rule = self.rules.get(key[0])
            if rule is None:
                continue
            alert = alerts.get(key)
            if alert is None:
                alert = alerts[key] = Alert(key[0], key[1], now, details)
            alert.details = details
            if alert.opened is None:
                if now - alert.first_seen >= rule.threshold:
                    alert.opened = alert.last_sent = now
                    out.append(Notification("open", alert.rule, alert.subject, details, now, now))
            elif rule.repeat > 0 and alert.last_sent is not None and now - alert.last_sent >= rule.repeat:
                alert.last_sent = now
                out.append(Notification("repeat", alert.rule, alert.subject, details, alert.opened, now))
        for key in sorted(set(alerts) - set(firing)):
            alert = alerts.pop(key)
            if alert.opened is None:
                continue  # it never reached its threshold: nobody was told, nobody is told
            alert.closed = now
            rule = self.rules.get(alert.rule)
            if rule is None or rule.send_close:
                out.append(Notification("resolved", alert.rule, alert.subject, alert.details, alert.opened, now,
                                        now))
        order = {"open": 0, "repeat": 1, "resolved": 2}
        return Step(sorted(out, key=lambda n: order[n.kind]), alerts)

    def open_alerts(self) -> list[Alert]:
        return sorted((a for a in self.alerts.values() if a.opened is not None), key=lambda a: a.key)

    def state(self) -> list[dict[str, Any]]:
        """The alerts held (pending and open), as plain rows for the store."""
        return [asdict(a) for a in sorted(self.alerts.values(), key=lambda a: a.key)]

    def restore(self, rows: Iterable[Mapping[str, Any]]) -> None:
        self.alerts = {}
        for row in rows:
            alert = Alert(**{k: row[k] for k in Alert.__dataclass_fields__ if k in row})
            self.alerts[alert.key] = alert
