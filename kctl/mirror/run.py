"""``kctl mirror up | down``: the mirror containers (kctl.mirror.config's Compose project) started, changed, or
removed; every check that can refuse runs before anything is written or started."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kctl.errors import KctlError
from kctl.mirror import config
from kctl.mirror.config import Source
from kctl.runtime import mirrors
from kctl.spec import ClusterSpec

Progress = Callable[[str], None]
UP_TIMEOUT = 180.0


def sources(spec: ClusterSpec, spec_path: Path) -> dict[str, Source]:
    """Each mirror's source: another kctl.yaml (loaded and checked like any cluster's), or bootstrap servers."""
    from kctl.spec import load_cluster

    out: dict[str, Source] = {}
    if spec.security.enabled:
        raise KctlError(f"{spec.name} has the secured profile: kctl mirrors into PLAINTEXT clusters only so far",
                        hint="mirror between clusters without `security.enabled` (docs/mirroring.md)")
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
            if src.security.enabled:
                raise KctlError(f"mirror {m.name}: the source {src.name} has the secured profile; kctl mirrors"
                                " PLAINTEXT clusters only so far", hint="docs/mirroring.md")
            out[m.name] = Source(m.name, src.bootstrap_servers, src)
        else:
            assert m.source.bootstrap_servers is not None
            out[m.name] = Source(m.name, m.source.bootstrap_servers, None)
    return out


def _reachable(bootstrap: str, what: str) -> None:
    from kctl.kafka.client import require_reachable

    try:
        require_reachable(None, bootstrap, timeout=8)
    except KctlError as exc:
        raise KctlError(f"{what}: {exc.message}", hint=exc.hint) from None


def up(spec: ClusterSpec, spec_path: Path, state_dir: Path, progress: Progress | None = None,
       timeout: float = UP_TIMEOUT) -> dict[str, str]:
    """Start every mirror (a changed configuration restarts its container) and wait until each one's source
    connector and tasks report RUNNING in the target cluster; returns mirror -> what it saw."""
    from kctl.mirror import status
    from kctl.render import write_text_files
    from kctl.runtime import engines
    from kctl.runtime.image import ensure_image

    say = progress or (lambda _m: None)
    found = sources(spec, spec_path)
    _reachable(spec.bootstrap_servers, f"{spec.name} (the target)")
    for m in spec.mirrors:
        _reachable(found[m.name].bootstrap_servers, f"mirror {m.name}'s source")
    if spec.image.ref is None:
        ensure_image(engines.client(spec, timeout=600), kafka_version=spec.versions.kafka,
                     scala_version=spec.versions.scala, progress=say)
    d = mirrors.directory(state_dir)
    for m in spec.mirrors:
        (d / m.name / "logs").mkdir(parents=True, exist_ok=True)
    changed = write_text_files(config.render(spec, state_dir, found), d)
    mirrors.compose(spec, state_dir, "up", "-d", "--remove-orphans")
    restart = sorted({config.service(m) for m in spec.mirrors for p in changed if p.parent.parent.name == m.name
                      and p.parent.name == "conf"})
    if restart:
        mirrors.compose(spec, state_dir, "restart", *restart)  # MirrorMaker reads mm2.properties once, at start
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    for m in spec.mirrors:
        while True:  # bounded: timeout
            ok, saw = status.running(spec, m)
            seen[m.name] = saw
            if ok:
                say(f"mirror {m.name} -> {spec.name}: {saw}")
                break
            if time.monotonic() > deadline:
                raise KctlError(f"mirror {m.name} did not start replicating within {timeout:.0f}s: {saw}",
                                hint=f"`kctl mirror status`; its log: {d / m.name / 'logs' / 'mirrormaker'}")
            time.sleep(1.0)
    return seen


def down(spec: ClusterSpec, state_dir: Path) -> bool:
    """Stop and remove the mirror containers (what they replicated stays in this cluster); False when none
    were started from this state dir."""
    return mirrors.down(spec, state_dir)
