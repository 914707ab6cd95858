"""``kctl mirror up | down``: the mirror containers (kctl.mirror.config's Compose project) started, changed, or
removed; every check that can refuse runs before anything is written or started."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

from kctl.errors import KctlError, TimeoutReached
from kctl.files import write_durable
from kctl.kafka.client import Target, admin, mirror_source, read_source_file, require_reachable
from kctl.mirror import access, config, loops, status
from kctl.mirror import stack as mirrors
from kctl.mirror.config import Login, Source
from kctl.model.spec import ClusterSpec, MirrorPolicy, MirrorSpec, load_cluster
from kctl.runtime.engine import engines
from kctl.runtime.image import build as image_build
from kctl.security.store import client_settings, write_secret
from kctl.wait import wait_until

Progress = Callable[[str], None]
UP_TIMEOUT = 180.0


def sources(spec: ClusterSpec, spec_path: Path) -> dict[str, Source]:
    """Each mirror's source: another kctl.yaml (loaded and checked like any cluster's), or bootstrap servers with
    their client settings. kctl's own readers of a kctl source use its admin user; MirrorMaker's login there is
    made by :func:`kctl.mirror.access.provision` at `kctl mirror up`."""
    out: dict[str, Source] = {}
    if spec.security.migration is not None:
        raise KctlError(f"{spec.name} is moving to the secured profile (security.migration is set)",
                        hint="finish the migration (docs/runbooks/secure-running-cluster.md), then mirror")
    for m in spec.mirrors:
        if m.source.spec is not None:
            path = Path(m.source.spec)
            if not path.is_absolute():
                path = spec_path.resolve().parent / path
            if not path.is_file():
                raise KctlError(f"mirror {m.name}: its source kctl.yaml {path} does not exist",
                                hint="mirrors[].source.spec is relative to this kctl.yaml")
            src, _ = load_cluster(path)
            if src.name == spec.name:
                raise KctlError(f"mirror {m.name}: its source is {spec.name} itself",
                                hint="a mirror copies another cluster into this one")
            if src.security.migration is not None:
                raise KctlError(f"mirror {m.name}: the source {src.name} is moving to the secured profile",
                                hint="finish its migration first (docs/runbooks/secure-running-cluster.md)")
            # Its admin user's settings, read now: a source without its secrets is refused before anything is asked.
            out[m.name] = Source(m.name, Target(src, src.bootstrap_servers, settings=client_settings(src)))
        else:
            target = mirror_source(m, spec_path)
            out[m.name] = Source(m.name, target, _login(m, target))
    return out


def _login(mirror: MirrorSpec, source: Target) -> Login:
    """MirrorMaker's login to a source kctl does not run: ``source.client``'s protocol, mechanism and user, with the
    password and the CA that :func:`kctl.kafka.client.mirror_source` read and checked for kctl's own clients."""
    c = mirror.source.client
    if c is None or c.security_protocol == "PLAINTEXT":
        return Login()
    ca = source.security.get("ssl.ca.location")
    return Login(c.security_protocol, c.sasl_mechanism if c.sasl else None, c.username,
                 source.security.get("sasl.password"),
                 read_source_file(mirror, Path(ca), "ca_file") if ca is not None else None)


def _reachable(target: Target, what: str) -> None:
    """A cluster answers with these settings; a refused login or TLS handshake is named as such."""
    from confluent_kafka import KafkaError

    refused: list[str] = []

    def seen(err: KafkaError) -> None:
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED):
            refused.append(err.str())

    client = admin(target, error_cb=seen)
    try:
        require_reachable(target, timeout=8, client=client)
    except KctlError as exc:
        client.poll(1.0)  # error_cb runs from poll(): the login's failure is queued there
        if refused:
            raise KctlError(f"{what}: {target.bootstrap_servers} refused the login: {refused[-1]}",
                            hint="check the user, its password and the CA (docs/mirroring.md)") from None
        raise KctlError(f"{what}: {exc.message}", hint=exc.hint) from None


def check_targets(spec: ClusterSpec, found: dict[str, Source]) -> None:
    """Refuse a mirror with the identity policy whose source topics have namesakes here that MirrorMaker did not
    make (:func:`kctl.mirror.config.foreign_targets`), naming each."""
    identity = [m for m in spec.mirrors if m.policy is MirrorPolicy.identity]
    if not identity:
        return
    here = set(admin(Target.of(spec)).list_topics(timeout=10).topics)
    for m in identity:
        there = set(admin(found[m.name].target).list_topics(timeout=10).topics)
        mine = {t for t, _ in status.replicated_offsets(spec, m)}
        foreign = config.foreign_targets(m, there, here, mine)
        if foreign:
            raise KctlError(
                f"mirror {m.name} refused, nothing was written: with policy identity it would write into"
                f" {len(foreign)} topic(s) of {spec.name} that MirrorMaker did not make"
                f" ({', '.join(foreign[:10])}{' ...' if len(foreign) > 10 else ''}): appending to them and"
                " syncing the source's topic configs over theirs",
                hint=f"rename or delete them here, or leave them out (mirrors[{m.name}].topics_exclude), or use"
                     " policy prefix (replicas named <mirror>.<topic>)")


def to_restart(spec: ClusterSpec, changed: list[Path], before: dict[str, str | None],
               after: dict[str, str | None]) -> list[str]:
    """Pure: the services whose configuration files (``changed``, under ``<mirror>/conf/``) changed while their
    container kept running through ``compose up`` (``before``/``after``: :func:`status.running_since`)."""
    kept = {m.name for m in spec.mirrors if before.get(m.name) is not None and after.get(m.name) == before[m.name]}
    return sorted({config.service(m) for m in spec.mirrors for p in changed if p.parent.parent.name == m.name
                   and p.parent.name == "conf" and m.name in kept})


def up(spec: ClusterSpec, spec_path: Path, state_dir: Path, progress: Progress | None = None,
       timeout: float = UP_TIMEOUT) -> dict[str, str]:
    """Start every mirror (a changed configuration restarts its container) and wait until each one's source
    connector and tasks report RUNNING in the target cluster; returns mirror -> what it saw."""
    say = progress or (lambda _m: None)
    found = sources(spec, spec_path)
    for warning in loops.check(spec, spec_path):  # a configuration that can loop: refused here, nothing written
        say(f"warning: {warning}")
    _reachable(Target.of(spec), f"{spec.name} (the target)")
    for m in spec.mirrors:
        _reachable(found[m.name].target, f"mirror {m.name}'s source")
    check_targets(spec, found)  # before anything is provisioned, written or started
    logins: dict[str, Login] = {}
    for m in spec.mirrors:
        src = found[m.name]
        source_login, logins[m.name] = access.provision(spec, m, src.target.spec, src.login)
        found[m.name] = dataclasses.replace(src, login=source_login)
    if spec.image.ref is None:
        image_build.ensure_image(engines.client(spec, timeout=600), kafka_version=spec.versions.kafka,
                     scala_version=spec.versions.scala, progress=say)
    d = mirrors.directory(state_dir)
    for m in spec.mirrors:
        (d / m.name / "logs").mkdir(parents=True, exist_ok=True)
    files, hidden = config.render(spec, state_dir, found, logins)
    changed = write_files(files, d)
    for m in spec.mirrors:
        for name, data in hidden.get(m.name, {}).items():
            if write_secret(config.secrets_dir(state_dir, m) / name, data):
                changed.append(d / m.name / "conf" / name)  # a new password or CA: MirrorMaker restarts
    # A container that runs already keeps the files it read at its start: those whose files changed restart.
    # One that up makes, makes again (a changed definition) or starts reads them now: the first up restarts
    # none, nor does an up whose container Compose has just replaced (a JVM start each saved).
    before = {m.name: status.running_since(spec, m) for m in spec.mirrors}
    mirrors.compose(spec, state_dir, "up", "-d", "--remove-orphans")
    restart = to_restart(spec, changed, before, {m.name: status.running_since(spec, m) for m in spec.mirrors})
    if restart:
        say(f"restarting {', '.join(restart)}: its configuration changed")
        mirrors.compose(spec, state_dir, "restart", *restart)  # MirrorMaker reads mm2.properties once, at start
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    for m in spec.mirrors:
        def probe(m: MirrorSpec = m) -> tuple[bool, str]:
            ok, seen[m.name] = status.running(spec, m)
            return ok, seen[m.name]

        try:
            wait_until(f"mirror {m.name} replicating", probe, max(0.0, deadline - time.monotonic()), poll=1.0)
        except TimeoutReached:
            raise KctlError(f"mirror {m.name} did not start replicating within {timeout:.0f}s:"
                            f" {seen.get(m.name, 'no answer')}",
                            hint=f"`kctl mirror status`; its log: {d / m.name / 'logs' / 'mirrormaker'}") from None
        say(f"mirror {m.name} -> {spec.name}: {seen[m.name]}")
    return seen


PRIVATE_FILES = ("mm2.properties",)  # readable by the host user alone: the entrypoint copies it for MirrorMaker's


def write_files(files: dict[str, str], out: Path) -> list[Path]:
    """Write the mirrors' rendered files under ``out`` (relative path -> text), each durably and only when its text
    changed; returns the paths that changed. mm2.properties is created 0600 (never readable by others, not for a
    moment: :func:`kctl.files.write_durable`), and one left 0644 by an older kctl is narrowed; the rest 0644."""
    changed: list[Path] = []
    for rel, text in files.items():
        target = out / rel
        mode = 0o600 if target.name in PRIVATE_FILES else 0o644
        try:
            same = target.read_text(encoding="utf-8") == text
        except (FileNotFoundError, UnicodeDecodeError):
            same = False
        if same:
            if target.stat().st_mode & 0o777 != mode:
                os.chmod(target, mode)
            continue
        write_durable(target, text, mode=mode)
        changed.append(target)
    return changed


def down(spec: ClusterSpec, state_dir: Path) -> bool:
    """Stop and remove the mirror containers (what they replicated stays in this cluster); False when none
    were started from this state dir."""
    return mirrors.down(spec, state_dir)
