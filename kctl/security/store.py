"""The secrets of a secured cluster, in ``<state>/secrets`` (mode 0700; every file 0600).

Layout::

    secrets/ca.key, ca.pem            the cluster's CA: it signs every certificate
    secrets/trust.pem                 the CAs clients trust: ca.pem, and during `kctl cert rotate-ca` the other one
    secrets/ca-next.*, ca-old.*       during `kctl cert rotate-ca`: the CA to come, then the CA that was
    secrets/passwords.json            generated passwords: the admin user, ZooKeeper principals, keystores
    secrets/users/<name>.password     users made with `kctl user create`
    secrets/<host>/                   what container <host> mounts read-only on contract.SECRETS_MOUNT:
        keystore.p12, ca.pem (the CAs it trusts), passwords.properties, kafka.jaas, zookeeper.jaas,
        admin-client.properties, scram-bootstrap.properties,
        controller-client.properties (KRaft controllers run: a migration, or finalized),
        kraft-format.args (a controller's node of a cluster made on KRaft: its storage format's --add-scram)

Passwords come from :mod:`secrets`, live in these files only, and reach the JVMs as files
(JAAS, FileConfigProvider): never kctl.yaml, an environment variable or a process argument.
This module is light (no cryptography, no jinja2 at import): every client reads it.
"""

from __future__ import annotations

import json
import os
import secrets as _secrets
import tempfile
from pathlib import Path

from kctl import contract
from kctl.deferred import defer_import
from kctl.errors import KctlError
from kctl.model import properties as p
from kctl.model.properties import SCRAM_MODULE, security_protocol
from kctl.model.spec import ClusterSpec, MetadataMode, state_dir_for

# Every client command reads its settings here; only the state dir's secret files are rendered, and only the
# secured profile's keystores need the CA.
defer_import("kctl.model.render")
defer_import("kctl.security.pki")

from kctl.model import render  # noqa: E402
from kctl.security import pki  # noqa: E402

DIR_MODE = 0o700
FILE_MODE = 0o600
PASSWORDS = "passwords.json"
USERS = "users"
SCRAM_BOOTSTRAP_FILE = "scram-bootstrap.properties"
KEYSTORE = "keystore"  # the key of the keystores' password in passwords.json
_USER_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
_PASSWORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")  # token_urlsafe's


def state_dir_of(spec: ClusterSpec) -> Path:
    """The state dir of a spec loaded by kctl (``kctl.cli.common.load`` makes ``state_dir`` absolute)."""
    return state_dir_for(spec, None)


def secrets_dir(state_dir: Path) -> Path:
    return state_dir / contract.HOST_SECRETS


def new_password() -> str:
    return _secrets.token_urlsafe(24)


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def write_secret(path: Path, data: bytes | str) -> bool:
    """Write a 0600 file atomically (created 0600, never world-readable for a moment); True if it changed."""
    raw = data.encode() if isinstance(data, str) else data
    _private_dir(path.parent)
    if path.exists() and path.read_bytes() == raw:
        os.chmod(path, FILE_MODE)
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def check_user(name: str) -> str:
    if not name or len(name) > 64 or any(c not in _USER_CHARS for c in name) or name[0] in "._-":
        raise KctlError(f"{name!r} is not a user name", hint="letters, digits, '.', '_' and '-', at most 64")
    return name


# ----- passwords ------------------------------------------------------------------------------


def passwords(spec: ClusterSpec, state_dir: Path, *, create: bool = False) -> dict[str, str]:
    """The generated passwords (admin user, ZooKeeper principals, keystores), made on first use with ``create``."""
    path = secrets_dir(state_dir) / PASSWORDS
    try:
        data: dict[str, str] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if not create:
            raise missing(spec, state_dir) from None
        data = {}
    except (OSError, ValueError) as exc:
        raise KctlError(f"cannot read {path}: {exc}", hint="its owner can read it (mode 0600)") from None
    wanted = [spec.security.admin_user, p.ZK_BROKER_PRINCIPAL, p.ZK_KCTL_PRINCIPAL, p.ZK_QUORUM_PRINCIPAL, KEYSTORE]
    # ZooKeeper's super user came later: a state dir made before has none until `kctl up` adds it, and
    # only the commands that need it (kctl zk reconfig, kctl node add|remove) ask for it.
    made = [*wanted, p.ZK_SUPER_PRINCIPAL]
    if create and any(k not in data for k in made):
        data = {**{k: new_password() for k in made}, **data}
        write_secret(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    elif any(k not in data for k in wanted):
        raise missing(spec, state_dir)
    return data


def missing(spec: ClusterSpec, state_dir: Path) -> KctlError:
    return KctlError(f"cluster {spec.name!r} has no secrets in {secrets_dir(state_dir)} (security.enabled is set)",
                     hint="`kctl up` creates them (run kctl from the directory of this kctl.yaml)")


def user_file(state_dir: Path, user: str) -> Path:
    return secrets_dir(state_dir) / USERS / f"{check_user(user)}.password"


def user_password(spec: ClusterSpec, state_dir: Path, user: str | None = None) -> tuple[str, str]:
    """(user, password) of the admin user (default) or of a user made with `kctl user create`."""
    admin = spec.security.admin_user
    name = user or admin
    if name == admin:
        return name, passwords(spec, state_dir)[admin]
    path = user_file(state_dir, name)
    try:
        return name, path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise KctlError(f"no password of user {name!r} in {path.parent}",
                        hint=f"`kctl user create {name}` makes the user and keeps its password there") from None


def save_user_password(state_dir: Path, user: str, password: str) -> Path:
    path = user_file(state_dir, user)
    write_secret(path, password + "\n")
    return path


def forget_user(state_dir: Path, user: str) -> None:
    user_file(state_dir, user).unlink(missing_ok=True)


def known_users(state_dir: Path) -> list[str]:
    d = secrets_dir(state_dir) / USERS
    return sorted(p.name[: -len(".password")] for p in d.glob("*.password")) if d.is_dir() else []


# ----- client settings -----------------------------------------------------------------------


def client_settings(spec: ClusterSpec, user: str | None = None, state_dir: Path | None = None, *,
                    own: bool = False) -> dict[str, str]:
    """librdkafka's security settings for the admin user (or ``user``) of a secured cluster; {} without security.

    The one builder of them: kctl's client factory and :mod:`kctl.kafka.describe` take this dict, ``kctl
    client-config`` prints it (or :func:`java_settings` of it), the stream job's Spark options translate it.
    ``own``: the settings of kctl's own clients, {} until the migration step from which kctl logs in
    (a user's client moves to the secured listeners earlier). The dict holds a password: it goes into a
    client's configuration or a 0600 file, never a process argument or a log line.
    """
    if not (spec.kctl_logs_in if own else spec.security.enabled):
        return {}

    sd = state_dir or state_dir_of(spec)
    name, password = user_password(spec, sd, user)
    conf = {"security.protocol": security_protocol(spec), "sasl.mechanisms": spec.security.sasl_mechanism,
            "sasl.username": name, "sasl.password": password}
    if spec.security.tls:
        conf["ssl.ca.location"] = str(client_ca_file(sd).resolve())
    return conf


def client_ca_file(state_dir: Path) -> Path:
    """The file of the CAs a client trusts: trust.pem (both CAs while one is rotated), or ca.pem where an older kctl
    made the secrets."""
    root = secrets_dir(state_dir)
    trust = root / contract.TRUST_FILE
    return trust if trust.exists() else root / contract.CA_FILE


NEXT_CA, OLD_CA = "ca-next", "ca-old"  # `kctl cert rotate-ca`: the CA to come, then the CA that was


def trusted_pems(root: Path, ca_pem: bytes) -> bytes:
    """The CAs to trust: the cluster's, then the one to come or the one that was (a rotation under way)."""
    out = [ca_pem.strip()]
    for other in (NEXT_CA, OLD_CA):
        f = root / f"{other}.pem"
        if f.exists():
            out.append(f.read_bytes().strip())
    return b"\n".join(out) + b"\n"


def java_settings(settings: dict[str, str]) -> dict[str, str]:
    """The Java client's spelling of :func:`client_settings` (Kafka's tools, Spark's ``kafka.*`` options)."""
    if not settings:
        return {}
    user, password = settings["sasl.username"], settings["sasl.password"]
    props = {"security.protocol": settings["security.protocol"], "sasl.mechanism": settings["sasl.mechanisms"],
             "sasl.jaas.config": f'{SCRAM_MODULE} required username="{user}" password="{password}";'}
    if "ssl.ca.location" in settings:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = settings["ssl.ca.location"]
    return props


# ----- creating everything (kctl up) ---------------------------------------------------------


def ensure(spec: ClusterSpec, state_dir: Path) -> list[str]:
    """Create what is missing: passwords, the CA, each container's certificate, keystore and secret files.

    Idempotent: an existing CA and passwords are kept (a certificate is remade when its names
    no longer match the container's). Returns what was written, for the progress output.
    """
    if not spec.security.enabled:
        return []

    root = _private_dir(secrets_dir(state_dir))
    made: list[str] = []
    pw = passwords(spec, state_dir, create=True)
    ca_key, ca_pem = root / "ca.key", root / contract.CA_FILE
    if not (ca_key.exists() and ca_pem.exists()):
        ca = pki.new_ca(spec.name)
        write_secret(ca_key, ca.key_pem)
        write_secret(ca_pem, ca.cert_pem)
        made.append("CA")
    ca = pki.KeyPair(ca_key.read_bytes(), ca_pem.read_bytes())
    trusted = trusted_pems(root, ca.cert_pem)
    if write_secret(root / contract.TRUST_FILE, trusted):
        made.append(contract.TRUST_FILE)
    admin = spec.security.admin_user
    for host, node, services in p.services_of(spec):
        address = spec.node_address(node)  # where clients reach it: in its certificate too
        d = _private_dir(root / host)
        files: dict[str, bytes | str] = {contract.CA_FILE: trusted}
        certs = _private_dir(root / "certs")  # the node's key stays on the host: its keystore carries it
        cert_file, key_file = certs / f"{host}.pem", certs / f"{host}.key"
        fresh = False
        if not (cert_file.exists() and key_file.exists()
                and set(pki.cert_sans(cert_file.read_bytes())) == set(pki.sans_of(host, address))
                and _signed_by(cert_file.read_bytes(), ca.cert_pem)):
            pair = pki.node_cert(ca, host, address)
            write_secret(key_file, pair.key_pem)
            write_secret(cert_file, pair.cert_pem)
            made.append(f"certificate of {host}")
            fresh = True
        pair = pki.KeyPair(key_file.read_bytes(), cert_file.read_bytes())
        if "kafka" in services:
            ks = d / contract.KEYSTORE_FILE
            if fresh or not ks.exists():
                files[contract.KEYSTORE_FILE] = pki.pkcs12(pair, ca.cert_pem, host, pw[KEYSTORE])
            files[contract.PASSWORDS_FILE] = f"{p.KEYSTORE_PASSWORD_KEY}={pw[KEYSTORE]}\n"
            files[contract.KAFKA_JAAS_FILE] = render.jaas_file(p.kafka_jaas(spec, pw), host)
            files[contract.ADMIN_CLIENT_FILE] = render.client_properties(
                p.admin_client(spec, pw[admin]), f"client settings of {admin} for Kafka's tools in {host}")
            files[SCRAM_BOOTSTRAP_FILE] = f"{spec.security.sasl_mechanism}=password={pw[admin]}\n"
            if spec.kraft_phase != "zookeeper":  # KRaft controllers run: kctl's login to them
                files[contract.CONTROLLER_CLIENT_FILE] = render.client_properties(
                    p.controller_client(spec, pw[admin]), f"client settings of {admin} for the KRaft controllers")
            if spec.metadata is MetadataMode.kraft and "zookeeper" in services:
                # made on KRaft: the node's controller formats its metadata log with the admin's credential
                files[contract.KRAFT_FORMAT_ARGS_FILE] = kraft_format_args(spec, pw[admin])
        if "zookeeper" in services and spec.security.zookeeper.sasl:
            files[contract.ZOOKEEPER_JAAS_FILE] = render.jaas_file(p.zookeeper_jaas(spec, pw), host)
        for name, data in files.items():
            if write_secret(d / name, data):
                made.append(f"{host}/{name}")
    return made


def kraft_format_args(spec: ClusterSpec, password: str) -> str:
    """What a controller of a cluster made on KRaft adds to its ``kafka-storage.sh format`` (a secret): the admin's
    SCRAM credential into the bootstrap metadata (KIP-900's ``--add-scram``), one argument a line, read by the tool
    from the file (``@file``) so that the password is no process argument. The password is kctl's own
    (:func:`new_password`: URL-safe, nothing the tool's ``[name=...,password=...]`` syntax would split on)."""
    if not password or any(c not in _PASSWORD_CHARS for c in password):
        raise KctlError("the admin's password in passwords.json is not one kctl generated (letters, digits, '-'"
                        " and '_'): kafka-storage.sh's --add-scram could not carry it",
                        hint="remove the admin's entry from passwords.json before the cluster's first `kctl up`"
                             " and kctl generates one")
    return f"--add-scram\n{spec.security.sasl_mechanism}=[name={spec.security.admin_user},password={password}]\n"


def forget_host(state_dir: Path, host: str) -> None:
    """Remove one container's secrets (its directory, certificate and key): a node taken out of the cluster."""
    import shutil

    root = secrets_dir(state_dir)
    if host in ("", ".", "..", USERS, "certs") or "/" in host:
        return
    shutil.rmtree(root / host, ignore_errors=True)
    for suffix in (".pem", ".key"):
        (root / "certs" / f"{host}{suffix}").unlink(missing_ok=True)


def _signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """The CA's key signed the certificate (its signature checked, not only the issuer's name: a rotated CA may
    share the old one's name in a state dir an older kctl made)."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    try:
        x509.load_pem_x509_certificate(cert_pem).verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False
