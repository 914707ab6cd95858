"""Moving a running PLAINTEXT cluster to the secured profile, one ``kctl apply`` per step.

The steps are ``security.migration``'s values (kctl.model.spec.Migration); what each renders is in
:mod:`kctl.model.properties` (``kafka_security``, ``zookeeper_security``, ``listeners``, ``kafka_jaas``), and the
runbook is docs/runbooks/secure-running-cluster.md. This module holds what apply adds around its roll:
which step the cluster runs now (from the files it was last rendered with), the refusal of a skipped step,
and the work after step 3's roll (Kafka's ZooKeeper ACL migration tool, the root znode's ACL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kctl import contract
from kctl.errors import KctlError
from kctl.model.properties import (
    INTER_BROKER_LISTENER,
    PROTOCOL_MAP,
    SASL_MECHANISMS,
    SECURE_INTERNAL,
    parse_properties,
)
from kctl.model.spec import PHASE_NAMES, PHASE_PLAIN, PHASE_SECURED, ClusterSpec, Migration
from kctl.runtime.engine import engines
from kctl.zk.znodes import secure_root

RUNBOOK = "docs/runbooks/secure-running-cluster.md"


def phase_of(props: dict[str, str]) -> int:
    """Pure: the step a broker's rendered server.properties belongs to (0 PLAINTEXT ... 5 secured)."""
    if not props.get(SASL_MECHANISMS):
        return PHASE_PLAIN
    protocols = dict(p.split(":", 1) for p in props.get(PROTOCOL_MAP, "").split(",") if ":" in p)
    if SECURE_INTERNAL not in protocols:
        return PHASE_SECURED
    first_plain = protocols.get("INTERNAL") == "PLAINTEXT"
    home = props.get(INTER_BROKER_LISTENER, "INTERNAL") == "INTERNAL"
    if first_plain:
        return 1 if home else 2
    return 4 if home else 3


def running_phase(spec: ClusterSpec, state_dir: Path) -> int | None:
    """The step of the files the cluster was last rendered with (the first broker's), or None: no render."""
    for node in spec.brokers:
        path = state_dir / spec.kafka_host(node) / contract.HOST_CONF / "server.properties"
        try:
            return phase_of(parse_properties(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            continue
    return None


def check_step(spec: ClusterSpec, state_dir: Path) -> tuple[int | None, int]:
    """(running step, kctl.yaml's step); KctlError (nothing changed) when kctl.yaml skips a step."""
    now, target = running_phase(spec, state_dir), spec.security_phase
    if now is None or abs(target - now) <= 1:
        return now, target
    steps = [m.value for m in Migration]
    if now == PHASE_PLAIN and target == PHASE_SECURED:
        why = ("a running PLAINTEXT cluster cannot take the whole secured profile in one roll: the brokers"
               " restarted first could not replicate from the others, and every PLAINTEXT client would be"
               " refused at once")
    else:
        why = "each step needs the one before it on every node"
    nxt = now + (1 if target > now else -1)
    return_hint = (f"set security.migration: {PHASE_NAMES[nxt]}" if 1 <= nxt <= 4
                   else "remove security.migration" if nxt == PHASE_SECURED else "set security.enabled: false")
    raise KctlError(f"apply refused, nothing was changed: the cluster runs {PHASE_NAMES[now]}, kctl.yaml asks for"
                    f" {PHASE_NAMES[target]}; {why}",
                    hint=f"{return_hint} and apply; the steps are {', '.join(steps)}, then none ({RUNBOOK})")


def secure_znodes(spec: ClusterSpec, say: Any) -> None:
    """After step 3's roll: Kafka's ZooKeeper ACL migration tool (its znodes made before get the brokers'
    secure ACL), run in a broker as the brokers' ZooKeeper principal, and the root znode's ACL."""
    argv = [f"{contract.KAFKA_BIN}/zookeeper-security-migration.sh", "--zookeeper.acl=secure",
            f"--zookeeper.connect={spec.zookeeper_connect}"]
    last = "no broker container running"
    for node in spec.brokers:
        host = spec.kafka_host(node)
        try:
            code, out = engines.exec_in(spec, host, argv, timeout=300)
        except KctlError as exc:
            last = exc.message
            continue
        if code != 0:
            raise KctlError(f"zookeeper-security-migration.sh failed in {host} (exit {code}): {out.strip()[-800:]}",
                            hint=f"the roll is done; run `kctl apply` again to retry the migration tool ({RUNBOOK})")
        say(f"{host}: zookeeper-security-migration.sh --zookeeper.acl=secure: Kafka's znodes now writable by the"
            " brokers' principal only")
        ok, detail = secure_root(spec)
        if not ok:
            raise KctlError(f"the root znode's ACL could not be set: {detail}", hint="`kctl zk get / --acl`")
        say(f"root znode: {detail}")
        return
    raise KctlError(f"cannot run zookeeper-security-migration.sh: {last}", hint="`kctl status`")
