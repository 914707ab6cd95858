"""``kctl support-bundle``: what a support engineer asks for first, in one archive, with no secret in it.

The archive holds kctl.yaml, the state dir's rendered files and records (configs, compose or unit files,
identity, roll, migration and apply records), each node's logs (their last lines), and the cluster's live
answers: ``status -o json``, topics, consumer groups, ACLs and SCRAM user names (the secured profile), the
monitor's open alerts and recent notifications, the engine's own view and the versions of everything. What
could not be read (a cluster that is down, a node that does not answer) is said in ``errors.txt`` instead;
the bundle is made all the same, which is when it is needed most.

Nothing secret goes in: the secrets dir, the data dirs, the monitor's database and every binary file stay
out, and every text that goes in is scrubbed twice: of every secret value kctl knows (the generated
passwords, each text file of the secrets dir, the notifiers' URL, header and password files and variables,
the mirror sources' password files), and of what looks like one (a ``password``/``secret``/``token``
property or key, a JAAS ``password="..."``, a PEM private key, a URL's path and query, which carry a
webhook's token). ``MANIFEST.txt`` lists each file with how many values were taken out of it.

The archive is written beside its destination as ``<name>.partial`` (mode 0600) and renamed into place
whole: an interrupted run (Ctrl-C, SIGTERM, a full disk) leaves no archive and no partial one.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import sys
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl import __version__, contract, output
from kctl.cluster import health, identity
from kctl.errors import KctlError, UsageError
from kctl.kafka import groups as kafka_groups
from kctl.kafka import security as kafka_security
from kctl.kafka import topics as kafka_topics
from kctl.kafka.client import Target
from kctl.model.properties import services_of
from kctl.model.spec import ClusterSpec
from kctl.monitor.notify import redact as cut_urls
from kctl.monitor.store import Store, db_path
from kctl.runtime import docker_api
from kctl.runtime import logs as node_logs
from kctl.runtime.engine import engines

LOG_LINES = 2000  # per log file: the end of each, enough for the last restarts
MAX_FILE_BYTES = 1_000_000  # a state file larger than this is cut to its end
REDACTED = "<redacted>"
# State dir entries that never go in: secrets, data, the monitor's database, locks.
SKIPPED_DIRS = frozenset({contract.HOST_SECRETS, "data", "kafka-data", "zookeeper-data", "kraft-data"})
SKIPPED_SUFFIXES = (".db", ".db-wal", ".db-shm", ".lock", ".jks", ".p12", ".pfx", ".key", ".tar", ".tgz", ".gz",
                    ".jar", ".png", ".partial")

_SECRET_KEY = r"[\w.\-]*(?:password|passwd|secret|token|credential|private[._-]?key|jaas|api[._-]?key)[\w.\-]*"
_PROPERTY = re.compile(rf"(?im)^(\s*-?\s*{_SECRET_KEY}\s*[=:]\s*)(\S.*)$")
_JSON_PAIR = re.compile(rf'(?i)("{_SECRET_KEY}"\s*:\s*)"(?:[^"\\]|\\.)*"')
_QUOTED = re.compile(r'(?i)\b(password|secret|token)(\s*=\s*)"[^"]*"')
_PEM = re.compile(r"-----BEGIN ([A-Z ]*PRIVATE KEY)-----.*?-----END \1-----", re.S)
_HEADER = re.compile(r"(?im)^(\s*(?:authorization|x-[\w-]*(?:token|key|secret)[\w-]*)\s*:\s*)(\S.*)$")


@dataclass
class Bundle:
    """What ``make`` wrote: the archive, its files, how many values were taken out, what could not be read."""

    path: Path
    files: list[str] = field(default_factory=list)
    redacted: int = 0
    errors: list[str] = field(default_factory=list)


# ----- redaction -------------------------------------------------------------------------------------------


def known_secrets(spec: ClusterSpec, state_dir: Path, env: Mapping[str, str] | None = None) -> set[str]:
    """Every secret value kctl knows for this cluster (at least 4 characters: shorter ones would scrub words)."""
    variables: Mapping[str, str] = os.environ if env is None else env
    found: set[str] = set()

    def add_text(text: str) -> None:
        text = text.strip()
        if not text:
            return
        found.add(text)
        for line in text.splitlines():
            line = line.strip()
            found.add(line)
            for sep in ("=", ":"):
                if sep in line:
                    found.add(line.split(sep, 1)[1].strip().strip('";'))
        found.update(m.group(0).split('"')[1] for m in _QUOTED.finditer(text))

    def add_file(path: str | Path | None) -> None:
        if not path:
            return
        p = Path(path).expanduser()
        try:
            raw = p.read_bytes()
        except OSError:
            return
        if b"\0" not in raw[:8192]:
            add_text(raw.decode("utf-8", errors="replace"))

    secrets = state_dir / contract.HOST_SECRETS
    if secrets.is_dir():
        for p in sorted(secrets.rglob("*")):
            if p.is_file():
                add_file(p)
        try:
            data = json.loads((secrets / "passwords.json").read_text())
            found.update(str(v) for v in data.values())
        except (OSError, ValueError, AttributeError):
            pass
    for n in spec.monitoring.notifiers:
        if n.url:
            found.add(n.url)
        for f in (n.url_file, n.headers_file, n.password_file):
            add_file(f)
        for var in (n.url_env, n.password_env):
            if var and variables.get(var):
                add_text(variables[var])
    for m in spec.mirrors:
        add_file(getattr(m.source, "password_file", None))
    return {s for s in found if len(s) >= 4 and s not in ("true", "false", "null", "none")}


def redact(text: str, known: Iterable[str]) -> tuple[str, int]:
    """``text`` without a known secret value or anything that looks like one; how many were taken out."""
    count = 0
    for value in sorted(set(known), key=len, reverse=True):
        if value in text:
            count += text.count(value)
            text = text.replace(value, REDACTED)
    for pattern, repl in ((_PEM, f"-----BEGIN PRIVATE KEY----- {REDACTED} -----END PRIVATE KEY-----"),
                          (_PROPERTY, rf"\1{REDACTED}"), (_JSON_PAIR, rf'\1"{REDACTED}"'),
                          (_QUOTED, rf'\1\2"{REDACTED}"'), (_HEADER, rf"\1{REDACTED}")):
        text, n = pattern.subn(repl, text)
        count += n
    cut = cut_urls(text)  # every URL to its scheme and host: a webhook's path and query carry its token
    return cut, count + (cut != text)


# ----- what goes in ------------------------------------------------------------------------------------------


def _state_files(state_dir: Path) -> Iterable[tuple[str, Path]]:
    if not state_dir.is_dir():
        return
    for p in sorted(state_dir.rglob("*")):
        rel = p.relative_to(state_dir)
        if not p.is_file() or p.is_symlink():
            continue
        if SKIPPED_DIRS & set(rel.parts[:-1]) or contract.HOST_LOGS in rel.parts[:-1]:
            continue
        if p.name.endswith(SKIPPED_SUFFIXES) or "monitor.db" in p.name:
            continue
        yield rel.as_posix(), p


def _read_text(p: Path, limit: int = MAX_FILE_BYTES) -> str | None:
    """A file's text (its end when larger than ``limit``); None for a binary file."""
    try:
        with p.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                f.seek(size - limit)
            raw = f.read(limit)
    except OSError:
        return None
    if b"\0" in raw[:8192]:
        return None
    text = raw.decode("utf-8", errors="replace")
    return (f"[the last {limit} of {size} bytes]\n" + text) if size > limit else text


def _logs(spec: ClusterSpec, state_dir: Path, lines_: int) -> Iterable[tuple[str, Callable[[], str]]]:
    for host, node, services in services_of(spec):
        for service in (*services, "supervisor"):
            def read(host: str = host, node_id: int = node.id, service: str = service) -> str:
                log = node_logs.locate(spec, state_dir, host if service != "supervisor" else str(node_id), service)
                text = node_logs.in_container(spec, log, tail=lines_, follow=False)
                if text is None:
                    if not log.path.exists():
                        raise KctlError(f"no {service} log at {log.path}")
                    text = node_logs.lines(log, tail=lines_, follow=False)
                return "".join(line + "\n" for line in text)

            yield f"logs/{host}/{service}.log", read


def _live(spec: ClusterSpec, state_dir: Path) -> Iterable[tuple[str, Callable[[], Any]]]:
    """The cluster's answers, each read on its own (one that fails is an error line, not a failed bundle)."""

    def status() -> Any:
        return health.status(spec, state_dir)

    def topics() -> Any:
        cluster = Target.of(spec)
        return [kafka_topics.describe(cluster, s.name) for s in kafka_topics.list_topics(cluster, internal=True)]

    def groups() -> Any:
        return kafka_groups.list_groups(Target.of(spec))

    def acls() -> Any:
        return kafka_security.list_acls(spec)

    def users() -> Any:
        return kafka_security.list_users(spec)

    def alerts() -> Any:
        path = db_path(state_dir)
        if not path.exists():
            return {"monitor": "never ran for this cluster"}
        store = Store(path, readonly=True)
        try:
            return {"open": store.alert_rows(), "recent": store.alert_log(time.time() - 86400)}
        finally:
            store.close()

    def engine() -> Any:
        return engines.for_spec(spec).ps(spec, state_dir)

    yield "status.json", status
    yield "topics.json", topics
    yield "groups.json", groups
    if spec.security.enabled:
        yield "acls.json", acls
        yield "scram-users.json", users
    yield "alerts.json", alerts
    yield "engine.txt", engine


def _own_cluster(spec: ClusterSpec, state_dir: Path) -> bool:
    """Whether the cluster answering on the spec's ports is this state dir's (ForeignCluster or NotRunning
    otherwise): a bundle never holds another cluster's topics or status under this one's name."""
    identity.verify(spec, state_dir)
    return True


def _versions(spec: ClusterSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"kctl": __version__, "python": sys.version.split()[0], "platform": platform.platform(),
                           "engine": spec.engine.value, "cluster": spec.name,
                           "versions": output.to_plain(spec.versions)}
    out["docker"] = _docker_version()
    return out


def _docker_version() -> str:
    try:
        return str(docker_api.client(5).version().get("Version"))
    except Exception as exc:  # noqa: BLE001 - no Docker here (engine hosts): said, not fatal
        return f"not reachable: {type(exc).__name__}"


# ----- the archive -------------------------------------------------------------------------------------------


def make(spec: ClusterSpec, spec_file: Path, state_dir: Path, out: Path, *, log_lines: int = LOG_LINES,
         force: bool = False, say: Callable[[str], None] = lambda _m: None) -> Bundle:
    """Write the support bundle of this cluster to ``out`` (a .tar.gz), whole or not at all."""
    if out.exists() and not force:
        raise UsageError(f"{out} exists", hint="name another file, or --force to replace it")
    if not out.parent.is_dir():
        raise UsageError(f"{out.parent} is not a directory", hint="name a file in an existing directory")
    known = known_secrets(spec, state_dir)
    bundle = Bundle(out)
    manifest: list[str] = []
    top = f"kctl-support-{spec.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    partial = out.with_name(out.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            def put(name: str, text: str) -> None:
                clean, n = redact(text, known)
                data = clean.encode("utf-8")
                info = tarfile.TarInfo(f"{top}/{name}")
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
                tar.addfile(info, io.BytesIO(data))
                bundle.files.append(name)
                bundle.redacted += n
                manifest.append(f"{name}\t{len(data)} bytes\t{n} value(s) redacted")

            spec_text = _read_text(spec_file)
            if spec_text is not None:
                put("kctl.yaml", spec_text)
            for rel, p in _state_files(state_dir):
                text = _read_text(p)
                if text is not None:
                    put(f"state/{rel}", text)
            say(f"{len(bundle.files)} file(s) of kctl.yaml and the state dir")
            for name, read in _logs(spec, state_dir, log_lines):
                try:
                    put(name, read())
                except Exception as exc:  # noqa: BLE001 - a node's log that cannot be read is an error line
                    bundle.errors.append(f"{name}: {_one_line(exc)}")
            say("the nodes' logs")
            try:
                own = _own_cluster(spec, state_dir)
            except Exception as exc:  # noqa: BLE001 - another cluster answers, or none: its answers stay out
                own = False
                bundle.errors.append(f"the cluster's answers: {_one_line(exc)}")
            for name, ask in (_live(spec, state_dir) if own else ()):
                try:
                    got = ask()
                    put(name, got if isinstance(got, str) else output.dump_json(got) + "\n")
                except Exception as exc:  # noqa: BLE001 - a cluster that is down is what a bundle is for
                    bundle.errors.append(f"{name}: {_one_line(exc)}")
            say("the cluster's answers")
            put("versions.json", json.dumps(_versions(spec), indent=2, sort_keys=True) + "\n")
            put("errors.txt", "".join(f"{e}\n" for e in bundle.errors) or "nothing: every part was read\n")
            put("MANIFEST.txt", "".join(f"{m}\n" for m in manifest))
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(partial, out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return bundle


def _one_line(exc: BaseException) -> str:
    msg = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return " ".join(str(msg).split())[:400]
