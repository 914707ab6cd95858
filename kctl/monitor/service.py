"""The monitor: one process per cluster (``kctl monitor start``) that samples, judges, remembers and tells.

Every ``monitoring.interval_seconds`` a round:

1. every consumer group's committed offsets, membership and end offsets (one AdminClient for the process's
   life) into the lag windows (:mod:`kctl.monitor.sampler`), each group judged as Burrow does; this runs on
   a thread of its own at the same interval (with a broker down, listing groups waits out a request timeout,
   and nothing else should), and each round stores what it found since the last;
2. one scrape of every exporter; the report between this round's scrape and the last (:mod:`.metrics`);
3. ZooKeeper's ``srvr`` on every server (the quorum), and each broker's data disk (its bind-mounted data dir);
4. the alert rules over all of that, through the tracker (:mod:`.alerts`): notifications go to the outbox;
5. the round's samples, evaluations, report, alert state and outbox committed to the store as one
   transaction (:mod:`.store`); the alert tracker takes its new state only once that committed, and a round that
   could not commit (a locked database, a full disk) gives its samples back to the next round, which makes the
   same alert transitions again: an alert is never open in memory without its notification queued.

Beside the rounds, a delivery thread empties the outbox (:meth:`Monitor.deliver_once`): each notifier's queue in
order, on a thread of its own (a slow receiver holds up no other). A receiver that is down, slow or answers 5xx
keeps its notification at the head of its queue, tried again after a delay that doubles (with jitter) up to
:data:`BACKOFF_CAP_S`; so does one that refuses kctl itself, whatever the notification (401, 403, 404 and the
others of :data:`notify.RECEIVER_HTTP`: a rotated token, a wrong URL). A notification the receiver refuses (an
HTTP 4xx about its body: 400, 413, 415, 422 ..., an SMTP 5xx for the message) is set aside while the ones behind
it go on, and after :data:`MAX_REFUSALS` refusals is marked failed
(logged, shown by ``kctl alerts``, sent again by ``kctl alerts --retry-failed``). A notification still undelivered
after the retention is given up with a log line. An HTTP server on 127.0.0.1 answers Burrow's consumer endpoints
and ``/metrics`` (:mod:`.api`). After a restart (a kill -9 included), the windows and the
alert state come back from the store: the evaluation has its window at once, and an open alert is neither
opened again nor forgotten.

The monitor follows kctl.yaml as it runs (:meth:`Monitor.follow_spec`, at each round): a node that ``kctl node
add`` or ``remove`` wrote there is watched, or no longer, from the next round on, as are changed rules and
notifiers; a file that no longer loads is logged once and the last good one kept; what fixes the process itself
(the interval, the window, the API's port, the cluster's name) is logged as taking effect at a restart.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl import contract
from kctl.deferred import defer_import
from kctl.errors import KctlError
from kctl.kafka import controllers
from kctl.kafka.client import Target, admin
from kctl.kraft import config as kc
from kctl.model.spec import ClusterSpec, load_cluster
from kctl.monitor import api, notify, sources
from kctl.monitor import metrics as mx
from kctl.monitor.alerts import Rule, Tracker
from kctl.monitor.lag import GroupStatus
from kctl.monitor.sampler import Windows, to_json
from kctl.monitor.store import Store, db_path
from kctl.runtime.engine import engines
from kctl.runtime.engine.engines import Capability
from kctl.security import certs
from kctl.wait import ticks
from kctl.zk import fourlw

defer_import("kctl.stream.spark")  # asked only of a cluster with a Spark cluster
from kctl.stream import spark as spark_cluster  # noqa: E402

DELIVERY_PERIOD_S = 2.0
PRUNE_EVERY = 30  # rounds
BACKOFF_BASE_S = 2.0  # the first retry's delay; doubled at each failure ...
BACKOFF_CAP_S = 300.0  # ... up to this
CERTIFICATES_EVERY_S = 3600.0  # how often a round reads the certificates again (they change only through kctl)
MAX_REFUSALS = 3  # a notification the receiver refused this often is marked failed


def backoff(attempts: int, rng: Callable[[], float] = random.random) -> float:
    """The delay before the next try after ``attempts`` failed ones: doubling from :data:`BACKOFF_BASE_S` up to
    :data:`BACKOFF_CAP_S`, each drawn between half and all of it (jitter: monitors that failed together do not
    retry together)."""
    d = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(max(0, attempts - 1), 30))
    return float(d / 2 + rng() * d / 2)


def rules_of(spec: ClusterSpec) -> dict[str, Rule]:
    return {name: Rule(name, r.threshold_seconds, r.repeat_seconds, r.send_close)
            for name, r in spec.monitoring.alerts.items() if r.enabled}


def endpoints_of(spec: ClusterSpec) -> list[mx.Endpoint]:
    return [mx.Endpoint(n.id, n.hostname, svc, url) for n, svc, url in spec.metrics_endpoints()]


# ----- the rules: what is firing now -------------------------------------------------------------------------


@dataclass
class Observation:
    """What one round saw, the rules' input."""

    report: dict[str, Any]  # metrics.report of this round (brokers, zookeepers, errors)
    zookeeper_modes: dict[str, str | None]  # node -> srvr Mode (None: no answer)
    participants: int
    groups: dict[str, dict[str, Any]]  # group -> to_json
    disks: dict[str, float] = field(default_factory=dict)  # "broker N" -> used percent
    certificates: dict[str, str] = field(default_factory=dict)  # "certificate HOST" -> what is wrong (expiry)
    # On KRaft: each controller's view of its quorum and the leader a majority names (kctl.kafka.controllers, as
    # `kctl status` reads them); None on ZooKeeper, where zookeeper_modes is the metadata quorum.
    kraft: tuple[dict[str, controllers.ControllerView], int | None] | None = None
    # kctl.yaml's Spark cluster: (subject, problem) as `kctl status` finds them (kctl.stream.spark.findings).
    spark: list[tuple[str, str]] = field(default_factory=list)


def firing(obs: Observation, disk_percent: float) -> dict[tuple[str, str], str]:
    """(rule, subject) -> details, for every condition holding in ``obs``."""
    out: dict[tuple[str, str], str] = {}
    brokers = obs.report.get("brokers", [])
    offline = sum(b.get("offline_partitions") or 0 for b in brokers)
    if offline:
        out[("offline-partitions", "cluster")] = f"{offline} partitions without a leader"
    if obs.kraft is not None:  # the controllers' quorum (a KRaft broker exports no ActiveControllerCount)
        views, leader = obs.kraft
        for host, v in sorted(views.items()):
            if v.error:
                out[("controller", f"controller {host}")] = f"{host}: controller: {v.error}"
        if leader is None:
            out[("controller", "cluster")] = "the KRaft controller quorum has no leader"
    else:
        answering = [b for b in brokers if b.get("active_controller") is not None]
        active = [b["id"] for b in answering if b["active_controller"]]
        if answering and len(active) != 1:
            out[("controller", "cluster")] = ("no active controller" if not active else
                                              f"{len(active)} active controllers: brokers {active}")
    urp = {b["id"]: b.get("under_replicated_partitions") or 0 for b in brokers}
    if sum(urp.values()):
        out[("under-replicated", "cluster")] = (f"{sum(urp.values())} under-replicated partitions ("
                                                + ", ".join(f"broker {i}: {n}" for i, n in sorted(urp.items())
                                                            if n) + ")")
    silent = sorted(n for n, mode in obs.zookeeper_modes.items() if mode is None)
    for node in silent:
        out[("zookeeper", f"zookeeper {node}")] = f"ZooKeeper on {node} does not answer srvr"
    modes = [m for m in obs.zookeeper_modes.values() if m is not None]
    serving = sum(1 for m in modes if m in ("leader", "follower", "standalone"))
    leaders = sum(1 for m in modes if m in ("leader", "standalone"))
    if obs.zookeeper_modes and (leaders != 1 or serving <= obs.participants // 2):
        out[("zookeeper", "quorum")] = f"ZooKeeper quorum lost: {serving} of {obs.participants} serving, " \
                                       f"{leaders} leader(s)"
    for group, doc in obs.groups.items():
        if doc["status"] != "OK":
            worst = ", ".join(f"{p['topic']}-{p['partition']} {p['status']}" for p in doc["problems"][:5])
            out[("group-status", f"group {group}")] = f"{doc['status']}, total lag {doc['total_lag']} ({worst})"
    for subject, pct in obs.disks.items():
        if pct > disk_percent:
            out[("disk", subject)] = f"data disk {pct:.1f} % full (rule: above {disk_percent:g} %)"
    for e in obs.report.get("errors", []):
        out[("exporter", f"{e['node']} {e['service']}")] = e["error"]
    for subject, details in obs.certificates.items():
        out[("certificate", subject)] = details
    for subject, details in obs.spark:
        out[("spark", subject)] = details
    return out


# ----- the monitor ------------------------------------------------------------------------------------------


class Monitor:
    def __init__(self, spec: ClusterSpec, state_dir: Path, *, interval_s: float | None = None,
                 window: int | None = None, log: Callable[[str], None] = print,
                 store_timeout_s: float = 10.0, spec_file: Path | None = None) -> None:
        self.spec = spec
        self.spec_file = spec_file
        self._spec_text = self._read_spec_text()  # what follow_spec compares kctl.yaml's text with
        self.state_dir = state_dir
        self._certs_read: tuple[float, tuple[int, ...], dict[str, str], dict[str, float]] | None = None
        self.interval_s = interval_s or spec.monitoring.interval_seconds
        self.window = window or spec.monitoring.window
        # Every line on one line: a group id or a receiver's answer may hold line breaks (a forged log line).
        self.log: Callable[[str], None] = lambda line: log(notify.clean(line, limit=4000))
        self.store_timeout_s = store_timeout_s
        self.store = Store(db_path(state_dir), timeout=store_timeout_s)
        self.notifiers = {n.key: n for n in spec.monitoring.notifiers}
        moved = self.store.migrate_outbox([n.key for n in spec.monitoring.notifiers], notify.redact)
        if moved:
            self.log(f"monitor: {moved} queued notification(s) of an older store now name their notifier")
        self._unrecorded: set[int] = set()  # delivered, but the store could not record it yet: not sent again
        self._orphans_told: dict[str, int] = {}
        self.windows = Windows(size=self.window, allowed_lag=spec.monitoring.allowed_lag)
        self.tracker = Tracker(rules_of(spec))
        self.endpoints = endpoints_of(spec)
        self.last_scrapes: list[mx.Scrape] | None = None
        self.statuses: dict[str, GroupStatus] = {}
        self.docs: dict[str, dict[str, Any]] = {}
        self.report: dict[str, Any] = {}
        self.alerts_view: list[dict[str, Any]] = []
        self.disks_view: dict[str, float] = {}
        # What the group sampling hands to the rounds (under the lock).
        self.pending: dict[str, list[Any]] = {}
        self.group_docs: dict[str, dict[str, Any]] = {}
        self.group_statuses: dict[str, GroupStatus] = {}
        self.group_states: dict[str, str] = {}
        self.rounds = 0
        self.last_round: float | None = None
        self.round_seconds = 0.0
        self.groups_seconds = 0.0
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # the API reads what a round writes
        self.target = Target.of(spec)  # what the groups' AdminClient is made for (at the first sampling)
        self._admin: Any = None
        self._restore()

    def _restore(self) -> None:
        for stored in self.store.stored_windows(self.window):
            self.windows.restore(stored)
        self.store.record_lag_parameters(self.window, self.windows.allowed_lag)
        self.tracker.restore(self.store.alert_rows())
        self.rounds = int(self.store.meta("rounds") or 0)

    def admin(self) -> Any:
        if self._admin is None:
            self._admin = admin(self.target)
        return self._admin

    # --- one round ----------------------------------------------------------------------------------------

    def groups_round(self) -> None:
        """Sample and judge every group; the results wait in :attr:`pending` for the next round to store."""
        started = time.monotonic()
        now = time.time()
        added = self.sample_groups(now)
        docs = {g: to_json(st, state=self.windows.states.get(g), window=self.window, source="monitor",
                           type=self.windows.types.get(g))
                for g, st in self.statuses.items()}
        states = dict(self.windows.states)
        with self.lock:
            for g, rows in added.items():
                self.pending.setdefault(g, []).extend(rows)
            self.group_docs = docs
            self.group_statuses = dict(self.statuses)
            self.group_states = states
            self.groups_seconds = time.monotonic() - started

    def groups_loop(self) -> None:
        """Groups on their own thread: with a broker down, listing groups waits out a request timeout, and the
        rounds (the exporters, ZooKeeper, the alerts) must not wait with it."""
        for _ in ticks(self.interval_s, stop=self.stopping):
            try:
                self.groups_round()
            except Exception as exc:  # noqa: BLE001
                self.log(f"monitor: group sampling failed: {type(exc).__name__}: {exc}")

    def sample_groups(self, now: float) -> dict[str, list[Any]]:
        """Every group of every type (:mod:`kctl.monitor.sources`: share and streams groups through Kafka's tools
        on a release that has them, listed once a sampling) into the windows, and each judged."""
        added: dict[str, list[Any]] = {}
        try:
            listing = sources.list_all(self.target, self.spec, client=self.admin())
        except KctlError as exc:
            self.log(f"monitor: cannot list groups: {exc}")
            return added
        names = sorted(listing.types)
        got = sources.snapshots(self.target, self.spec, listing, names, int(now * 1000), client=self.admin())
        for g, why in sorted(got.errors.items()):
            self.log(f"monitor: cannot describe group {g}: {why}")
        for snap in got.snapshots:
            added[snap.group] = self.windows.observe(snap)
        for g in names:
            if g in self.windows.groups:
                self.statuses[g] = self.windows.evaluate(g, now)
        for gone in set(self.statuses) - set(names):
            del self.statuses[gone]
        return added

    def spark(self) -> list[tuple[str, str]]:
        """What is wrong with kctl.yaml's Spark cluster, as its master says (nothing without one)."""
        if self.spec.spark is None:
            return []
        try:
            return spark_cluster.findings(self.spec, spark_cluster.status_of(self.spec, 5.0))
        except Exception as exc:  # noqa: BLE001 - an answer kctl cannot read is an alert, never a lost round
            return [("spark-master", f"spark: the master's answer cannot be read ({exc})")]

    def kraft_quorum(self) -> tuple[dict[str, controllers.ControllerView], int | None] | None:
        """On KRaft: every controller's view and the leader a majority of them names; None on ZooKeeper."""
        if not self.spec.on_kraft:
            return None
        try:
            views = controllers.views(self.spec, 2.0)
        except Exception as exc:  # noqa: BLE001 - files kctl cannot read are an alert, never a lost round
            views = {self.spec.zk_host(n): controllers.ControllerView(
                self.spec.zk_host(n), kc.controller_id(n), error=f"its quorum-state file cannot be read ({exc})")
                for n in kc.controller_nodes(self.spec)}
        return views, controllers.controller_leader(self.spec, views)

    def zookeeper_modes(self) -> dict[str, str | None]:
        """Each ZooKeeper's srvr mode (None: no answer); {} on KRaft, where no ZooKeeper runs."""
        out: dict[str, str | None] = {}
        if self.spec.on_kraft:
            return out
        for n in self.spec.nodes:
            try:
                ans = fourlw.ask(self.spec.node_address(n), self.spec.zk_host_port(n), "srvr", timeout=2.0)
                out[n.hostname] = fourlw.parse_srvr(ans.text).mode
            except fourlw.FourLetterError:
                out[n.hostname] = None
        return out

    def disks(self) -> dict[str, float]:
        """Each broker's data disk, from its data dir bind-mounted from the state dir (engine compose)."""
        out: dict[str, float] = {}
        if not engines.supports(self.spec, Capability.DATA_IN_STATE_DIR):
            return out
        for n in self.spec.brokers:
            data = self.state_dir / self.spec.kafka_host(n) / "data"
            if data.is_dir():
                u = shutil.disk_usage(data)
                out[f"broker {n.id}"] = 100.0 * u.used / u.total if u.total else 0.0
        return out

    def certificates(self) -> dict[str, str]:
        """The secured profile's certificates expired or expiring soon, read from the state dir's secrets hourly
        and whenever they changed (`kctl cert renew` writes them: its alert closes at the next round)."""
        if not self.spec.security.enabled:
            return {}
        now = time.monotonic()
        where = self.state_dir / contract.HOST_SECRETS
        try:
            stamp = tuple(p.stat().st_mtime_ns for p in (where / "certs", where / contract.CA_FILE))
        except OSError:
            stamp = ()
        if self._certs_read is None or self._certs_read[1] != stamp or \
                now - self._certs_read[0] >= CERTIFICATES_EVERY_S:
            days: dict[str, float] = {}
            if not stamp:
                found: dict[str, str] = {}
            else:
                try:
                    inv = certs.inventory(self.spec, self.state_dir,
                                          warn_days=self.spec.monitoring.certificate_warn_days)
                    found, days = certs.late_of(inv), {c.name: c.days_left for c in inv if c.not_after}
                except Exception as exc:  # noqa: BLE001 - unreadable secrets are said, the round goes on
                    found = {"certificates": f"cannot read the certificates: {type(exc).__name__}: {exc}"}
            self._certs_read = (now, stamp, found, days)
        return dict(self._certs_read[2])

    def certificate_days(self) -> dict[str, float]:
        """Days left of each certificate, as the last round read them (the monitor's /metrics)."""
        read = self._certs_read
        return dict(read[3]) if read else {}

    def _read_spec_text(self) -> str | None:
        if self.spec_file is None:
            return None
        try:
            return self.spec_file.read_text(encoding="utf-8")
        except OSError:
            return None

    def follow_spec(self) -> bool:
        """kctl.yaml read again if its text changed since the last look: the nodes (their exporters, ZooKeeper or
        controller files, data disks), the rules and the notifiers of the new one from this round on; the
        settings of the process itself only at a restart (logged). A file that does not load (mid-edit, or
        invalid) is logged once per text and the last good spec kept. True when the spec was replaced."""
        text = self._read_spec_text()
        if text is None or text == self._spec_text:
            return False
        self._spec_text = text
        assert self.spec_file is not None
        try:
            new, _warnings = load_cluster(self.spec_file)
        except KctlError as exc:
            self.log(f"monitor: {self.spec_file} changed but does not load, so the monitor watches as before:"
                     f" {exc}")
            return False
        old = self.spec
        if new.name != old.name:
            self.log(f"monitor: {self.spec_file} now names cluster {new.name!r}, not {old.name!r}: kept watching"
                     f" {old.name!r}; `kctl monitor stop` and `start` for the other")
            return False
        fixed = [label for label, a, b in (
            ("monitoring.interval_seconds", old.monitoring.interval_seconds, new.monitoring.interval_seconds),
            ("monitoring.window", old.monitoring.window, new.monitoring.window),
            ("monitoring.allowed_lag", old.monitoring.allowed_lag, new.monitoring.allowed_lag),
            ("monitoring.monitor_port", old.monitoring.monitor_port, new.monitoring.monitor_port)) if a != b]
        was = {n.hostname for n in old.nodes}
        now = {n.hostname for n in new.nodes}
        self.spec = new
        self.endpoints = endpoints_of(new)
        self.tracker.rules = rules_of(new)
        self.notifiers = {n.key: n for n in new.monitoring.notifiers}
        self._certs_read = None
        target = Target.of(new)
        if (target.bootstrap_servers, new.security) != (self.target.bootstrap_servers, old.security):
            self._admin = None  # the next sampling makes a client for the new bootstrap or login
        self.target = target
        change = "; ".join(part for part in (
            f"added {', '.join(sorted(now - was))}" if now - was else "",
            f"removed {', '.join(sorted(was - now))}" if was - now else "") if part) or "the same nodes"
        self.log(f"monitor: {self.spec_file} changed: watching {len(now)} node(s) ({change}) from this round"
                 + (f"; {', '.join(fixed)} take(s) effect at a restart (`kctl monitor stop`, then `start`)"
                    if fixed else ""))
        return True

    def round(self, *, with_groups: bool = True) -> list[Any]:
        """One round; ``with_groups``: sample the groups in it too (else :meth:`groups_loop` does, beside)."""
        started = time.monotonic()
        self.follow_spec()
        if with_groups:
            self.groups_round()
        now = time.time()
        with self.lock:
            added, self.pending = self.pending, {}
            docs, statuses, states = dict(self.group_docs), dict(self.group_statuses), dict(self.group_states)
        scrapes = mx.scrape_all(self.endpoints)
        report = mx.report(self.last_scrapes or scrapes, scrapes)
        self.last_scrapes = mx.carry(self.last_scrapes or [], scrapes)  # a missed scrape: from the last answer
        obs = Observation(report, self.zookeeper_modes(), len(self.spec.participants), docs, self.disks(),
                          self.certificates(), self.kraft_quorum(), self.spark())
        step = self.tracker.step(now, firing(obs, self.spec.monitoring.disk_percent))
        notes = step.notes
        ts_ms = int(now * 1000)
        rounds = self.rounds + 1
        with self._redone_if_not_recorded(added), self.store.round():
            for g, rows in added.items():
                self.store.add_samples(g, rows)
            for g, st in statuses.items():
                self.store.add_group(g, ts_ms, docs[g]["status"], st.total_lag, states.get(g), st.complete,
                                     docs[g].get("type"))
            self.store.add_metrics(ts_ms, report)
            self.store.save_alerts(step.state())
            for n in notes:
                body = n.to_json(self.spec.name)
                self.store.log_alert(now, n.kind, n.rule, n.subject, body)
                for key in self.notifiers:
                    self.store.enqueue(key, body, created=now)
            self.store.set_meta("rounds", str(rounds))
            self.store.set_meta("last_round", f"{now:.3f}")
            if rounds % PRUNE_EVERY == 0:
                self.store.prune(ts_ms - int(self.spec.monitoring.retention_hours * 3600 * 1000))
        self.tracker.apply(step)
        self.rounds = rounds
        for n in notes:
            self.log(f"monitor: alert {n.kind}: {n.rule} {n.subject}: {n.details}")
        with self.lock:
            self.docs, self.report = docs, report
            self.alerts_view = [dict(a.__dict__) for a in self.tracker.open_alerts()]
            self.disks_view = dict(obs.disks)
            self.last_round = now
            self.round_seconds = time.monotonic() - started
        return notes

    @contextmanager
    def _redone_if_not_recorded(self, added: dict[str, list[Any]]) -> Iterator[None]:
        """Around a round's transaction: if it does not commit, nothing of the round was written, so its samples
        go back to the next round; the tracker, whose step is applied only after the commit, keeps its state, so
        the next round makes the same transitions (and queues their notifications)."""
        try:
            yield
        except Exception:
            with self.lock:
                for g, rows in added.items():
                    self.pending[g] = [*rows, *self.pending.get(g, [])]
            raise

    def run(self) -> None:
        """Rounds until :attr:`stopping` is set (SIGTERM, SIGINT)."""
        server = api.serve(self, self.spec.monitoring.monitor_port)
        deliverer = threading.Thread(target=self.deliver_loop, name="kctl-monitor-delivery", daemon=True)
        deliverer.start()
        sampler = threading.Thread(target=self.groups_loop, name="kctl-monitor-groups", daemon=True)
        sampler.start()
        self.log(f"monitor: cluster {self.spec.name}, every {self.interval_s:g} s, window {self.window}, "
                 f"store {self.store.path}, API http://127.0.0.1:{self.spec.monitoring.monitor_port}")
        try:
            for _ in ticks(self.interval_s, stop=self.stopping):
                try:
                    self.round(with_groups=False)
                except sqlite3.Error as exc:
                    self.log(f"monitor: round not recorded, the store {self.store.path} failed:"
                             f" {type(exc).__name__}: {exc}; its samples and alerts are made again by the next round")
                except Exception as exc:  # noqa: BLE001 - a failed round is logged; the monitor carries on
                    import traceback

                    where = traceback.extract_tb(exc.__traceback__)[-1]
                    self.log(f"monitor: round failed: {type(exc).__name__}: {exc} ({where.filename}:{where.lineno})")
        finally:
            server.shutdown()
            deliverer.join(timeout=DELIVERY_PERIOD_S * 2)
            sampler.join(timeout=self.interval_s * 2)
            self.store.close()

    # --- delivery --------------------------------------------------------------------------------------------

    def deliver_once(self, store: Store, now: float | None = None) -> int:
        """One pass over the outbox; returns how many notifications were delivered.

        Each notifier's queue in order, each notifier on its own thread (a slow receiver holds up no other).
        A failure that says the receiver is down or busy stops that queue until the delay of :func:`backoff`
        (the ones behind wait, their order kept); a refusal of this one notification sets it aside for its own
        delay while the ones behind go on, and the :data:`MAX_REFUSALS`-th marks it failed. A notification for a
        notifier kctl.yaml no longer has is reported, never sent to another; one older than the retention is
        given up with a log line."""
        from concurrent.futures import ThreadPoolExecutor

        now = time.time() if now is None else now
        self._expire(store, now)
        self._record_unrecorded(store)
        queues: dict[str, list[dict[str, Any]]] = {}
        orphans: dict[str, int] = {}
        for row in store.outbox(state="pending"):
            if row["id"] in self._unrecorded:
                continue
            if row["notifier"] in self.notifiers:
                queues.setdefault(row["notifier"], []).append(row)
            else:
                orphans[row["notifier"]] = orphans.get(row["notifier"], 0) + 1
        self._tell_orphans(orphans)
        if not queues:
            return 0

        def run(key: str, rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], notify.Outcome]]:
            out: list[tuple[dict[str, Any], notify.Outcome]] = []
            for row in rows:
                if self.stopping.is_set():
                    break
                if row["next_at"] > now:
                    if row["permanent"]:
                        continue  # refused before, set aside until its own time: the rest go on
                    break  # the receiver was down: it waits out its delay, the rest behind it
                outcome = notify.send(self.notifiers[key], row["body"])
                out.append((row, outcome))
                if not outcome.ok and not outcome.permanent:
                    break  # down or busy: the later ones wait for the next try, in order
            return out

        sent = 0
        with ThreadPoolExecutor(max_workers=len(queues)) as pool:
            results = list(pool.map(lambda kv: run(*kv), queues.items()))
        for done in results:
            sent += self._record(store, done, now)
        return sent

    def _record(self, store: Store, done: list[tuple[dict[str, Any], notify.Outcome]], now: float) -> int:
        lines: list[str] = []
        try:
            with store.round():
                for row, outcome in done:
                    if outcome.ok:
                        store.delivered(row["id"])
                        continue
                    attempts = row["attempts"] + 1
                    refusals = row["refusals"] + (1 if outcome.permanent else 0)
                    give_up = outcome.permanent and refusals >= MAX_REFUSALS
                    delay = backoff(attempts)
                    assert outcome.error is not None
                    store.failed(row["id"], outcome.error, next_at=now + delay, permanent=outcome.permanent,
                                 give_up=give_up)
                    what = f"{row['body'].get('alert')} {row['body'].get('state')} {row['body'].get('subject')}"
                    if give_up:
                        lines.append(f"monitor: notification given up, refused {refusals} times ({what}):"
                                     f" {outcome.error}; `kctl alerts` shows it, `kctl alerts --retry-failed`"
                                     " sends it again")
                    else:
                        lines.append(f"monitor: notification not delivered (attempt {attempts},"
                                     f" {'refused: set aside, the next ones go on' if outcome.permanent else 'kept'};"
                                     f" next try in {delay:.0f} s) ({what}): {outcome.error}")
        except sqlite3.Error as exc:
            # Sent, but not recorded: not sent again by this process (recorded at the next pass).
            self._unrecorded.update(row["id"] for row, outcome in done if outcome.ok)
            self.log(f"monitor: cannot record deliveries in the store: {type(exc).__name__}: {exc}")
        for line in lines:
            self.log(line)
        return sum(1 for _, outcome in done if outcome.ok)

    def _record_unrecorded(self, store: Store) -> None:
        if not self._unrecorded:
            return
        try:
            with store.round():
                for outbox_id in self._unrecorded:
                    store.delivered(outbox_id)
            self._unrecorded.clear()
        except sqlite3.Error as exc:
            self.log(f"monitor: cannot record deliveries in the store: {type(exc).__name__}: {exc}")

    def _expire(self, store: Store, now: float) -> None:
        cutoff = now - self.spec.monitoring.retention_hours * 3600
        with store.round():
            gone = store.expire_outbox(cutoff)
        for row in gone:
            if row["state"] == "failed":
                continue  # logged when it was given up
            body = row["body"]
            self.log(f"monitor: notification to {row['notifier']} given up after"
                     f" {self.spec.monitoring.retention_hours:g} h (monitoring.retention_hours) and"
                     f" {row['attempts']} attempt(s): {body.get('alert')} {body.get('state')} {body.get('subject')}"
                     f"; last error: {row['last_error'] or 'none'}")

    def _tell_orphans(self, orphans: dict[str, int]) -> None:
        for key, n in sorted(orphans.items()):
            if self._orphans_told.get(key) != n:
                self.log(f"monitor: {n} notification(s) queued for notifier {key!r}, which kctl.yaml no longer has:"
                         " not sent to any other; they stay (shown by `kctl alerts`) until that notifier is back or"
                         f" the retention ({self.spec.monitoring.retention_hours:g} h) ends")
        self._orphans_told = dict(orphans)

    def deliver_loop(self) -> None:
        store = Store(self.store.path, timeout=self.store_timeout_s)
        try:
            for _ in ticks(DELIVERY_PERIOD_S, stop=self.stopping):
                try:
                    self.deliver_once(store)
                except Exception as exc:  # noqa: BLE001
                    self.log(f"monitor: delivery failed: {type(exc).__name__}: {exc}")
        finally:
            store.close()


    # --- what the API shows -------------------------------------------------------------------------------

    def snapshot(self) -> tuple[dict[str, dict[str, Any]], dict[str, Any], float | None]:
        with self.lock:
            return dict(self.docs), dict(self.report), self.last_round

    def open_alerts(self) -> list[Mapping[str, Any]]:
        with self.lock:
            return list(self.alerts_view)

    def disk_usage(self) -> dict[str, float]:
        """Each broker's data disk as the last round measured it (used percent)."""
        with self.lock:
            return dict(self.disks_view)

