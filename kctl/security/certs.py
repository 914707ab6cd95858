"""The secured profile's certificates as they are on disk: ``kctl cert status``, the monitor's expiry rule and
``kctl cert renew``.

Read from the state dir's secrets (docs/security.md's layout): the cluster's CA (``secrets/ca.pem``), each
container's certificate (``secrets/certs/<host>.pem``), and what each container is given: the CA copy it
trusts (``secrets/<host>/ca.pem``) and, where Kafka runs, the keystore it serves
(``secrets/<host>/keystore.p12``). For each certificate: its names, validity, days left, whether the CA
signed it (the signature checked with the CA's key, not only the issuer's name), whether the container's
keystore holds this very certificate, and whether the container trusts this CA. Nothing here talks to the
cluster: a broker reads its keystore at start, so a keystore newer than the broker's start is served after
its next restart (which ``kctl cert renew`` makes, through the gated roll).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl import contract
from kctl.errors import KctlError
from kctl.model import properties as p
from kctl.model.spec import ClusterSpec
from kctl.security import pki, store

WARN_DAYS = 30  # the default of monitoring.certificate_warn_days


@dataclass
class CertInfo:
    name: str  # "CA" or the container host
    subject: str
    sans: list[str]
    not_before: str  # ISO 8601, UTC
    not_after: str
    days_left: float
    signed_by_ca: bool
    keystore: str | None = None  # "current" | "other certificate" | "missing" | "unreadable"; None: no Kafka
    trusts_ca: bool | None = None  # the container's CA copy is this CA (None for the CA itself)
    problems: list[str] = field(default_factory=list)


def _load(pem: bytes) -> Any:
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem)


def _load_all(pem: bytes) -> list[Any]:
    from cryptography import x509

    return list(x509.load_pem_x509_certificates(pem))


def _signed_by(cert: Any, ca: Any) -> bool:
    from cryptography.exceptions import InvalidSignature

    try:
        cert.verify_directly_issued_by(ca)
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False


def _sans(cert: Any) -> list[str]:
    from cryptography import x509

    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(v) for v in (*ext.get_values_for_type(x509.DNSName), *ext.get_values_for_type(x509.IPAddress))]


def _info(name: str, cert: Any, ca: Any, now: dt.datetime, warn_days: float) -> CertInfo:
    left = (cert.not_valid_after_utc - now).total_seconds() / 86400
    info = CertInfo(name, cert.subject.rfc4514_string(), _sans(cert), cert.not_valid_before_utc.isoformat(),
                    cert.not_valid_after_utc.isoformat(), round(left, 2), _signed_by(cert, ca))
    if left <= 0:
        info.problems.append(f"expired on {cert.not_valid_after_utc:%Y-%m-%d}")
    elif left < warn_days:
        info.problems.append(f"expires in {left:.1f} days, on {cert.not_valid_after_utc:%Y-%m-%d}")
    if now < cert.not_valid_before_utc:
        info.problems.append(f"not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
    if not info.signed_by_ca:
        info.problems.append("not signed by the cluster's CA")
    return info


def inventory(spec: ClusterSpec, state_dir: Path, *, warn_days: float = WARN_DAYS,
              now: dt.datetime | None = None) -> list[CertInfo]:
    """The CA and every container's certificate, each with what is wrong with it (``problems``)."""
    from cryptography.hazmat.primitives.serialization import pkcs12


    if not spec.security.enabled:
        raise KctlError(f"cluster {spec.name!r} is not secured: it has no certificates",
                        hint="security.enabled in kctl.yaml (docs/security.md)")
    root = store.secrets_dir(state_dir)
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        ca_pem = (root / contract.CA_FILE).read_bytes()
    except FileNotFoundError:
        raise KctlError(f"no CA in {root}: the cluster's secrets were never made here",
                        hint="`kctl up` makes them (or `kctl apply` on a running cluster)") from None
    ca = _load(ca_pem)
    out = [_info("CA", ca, ca, now, warn_days)]
    for other, label in ((store.NEXT_CA, "CA (next)"), (store.OLD_CA, "CA (old)")):  # a rotation under way
        f = root / f"{other}.pem"
        if f.exists():
            c = _load(f.read_bytes())
            out.append(_info(label, c, c, now, warn_days))
    passwords: dict[str, str] | None = None
    for host, _node, services in p.services_of(spec):
        path = root / "certs" / f"{host}.pem"
        try:
            cert = _load(path.read_bytes())
        except (OSError, ValueError) as exc:
            out.append(CertInfo(host, "", [], "", "", 0.0, False, problems=[f"no certificate: {path} ({exc})"]))
            continue
        info = _info(host, cert, ca, now, warn_days)
        try:
            info.trusts_ca = ca in _load_all((root / host / contract.CA_FILE).read_bytes())  # a bundle while rotating
        except (OSError, ValueError):
            info.trusts_ca = False
        if not info.trusts_ca:
            info.problems.append(f"{host} is not given this CA to trust")
        if "kafka" in services:
            ks = root / host / contract.KEYSTORE_FILE
            if not ks.exists():
                info.keystore = "missing"
            else:
                try:
                    if passwords is None:
                        passwords = store.passwords(spec, state_dir)
                    _key, served, _chain = pkcs12.load_key_and_certificates(
                        ks.read_bytes(), passwords[store.KEYSTORE].encode())
                    info.keystore = "current" if served is not None and served == cert else "other certificate"
                except (KctlError, KeyError, ValueError):
                    info.keystore = "unreadable"
            if info.keystore != "current":
                info.problems.append(f"keystore {info.keystore}")
        out.append(info)
    return out


def expiring(spec: ClusterSpec, state_dir: Path, warn_days: float,
             now: dt.datetime | None = None) -> dict[str, str]:
    """The monitor's ``certificate`` rule: subject -> details of each certificate expired or expiring within
    ``warn_days``; nothing for a cluster without security or without secrets here."""
    if not spec.security.enabled or not (state_dir / contract.HOST_SECRETS / contract.CA_FILE).exists():
        return {}
    return late_of(inventory(spec, state_dir, warn_days=warn_days, now=now))


def late_of(found: list[CertInfo]) -> dict[str, str]:
    """Of an inventory, the certificates expired or expiring within its warning: subject -> details."""
    out = {}
    for c in found:
        late = [p for p in c.problems if p.startswith(("expired", "expires"))]
        if late:
            out[f"certificate {c.name}"] = f"{c.subject}: {late[0]}"
    return out


def renew(spec: ClusterSpec, state_dir: Path, hosts: list[str] | None = None) -> list[str]:
    """New leaf certificates (and keystores) for ``hosts`` (all), signed by the same CA: clients that trust it
    go on trusting the brokers. What was made; the brokers serve them after their next restart."""
    known = [h for h, _n, _s in p.services_of(spec)]
    unknown = sorted(set(hosts or []) - set(known))
    if unknown:
        raise KctlError(f"no container {', '.join(unknown)} in cluster {spec.name!r}",
                        hint=f"its containers: {', '.join(known)}")
    root = store.secrets_dir(state_dir)
    for host in hosts or known:
        for suffix in (".pem", ".key"):
            (root / "certs" / f"{host}{suffix}").unlink(missing_ok=True)
    return store.ensure(spec, state_dir)


# ----- kctl cert rotate-ca ---------------------------------------------------------------------------------------
# A new CA in three steps, each ended by a gated roll, so that no client is refused in between:
#   trust    the new CA is made (ca-next) and trusted beside the old one: every container's ca.pem and the clients'
#            trust.pem hold both; the roll makes the brokers trust both;
#   reissue  the new CA becomes the cluster's (ca-next -> ca, ca -> ca-old); every certificate and keystore is made
#            again, signed by it; both CAs stay trusted; the roll makes the brokers serve the new certificates;
#   drop     the old CA goes: only the new one is trusted; the roll makes the brokers forget the old one.
# Clients outside kctl take secrets/trust.pem (both CAs) between `trust` and `reissue`, and the new ca.pem after
# `drop`. The record (secrets/ca-rotation.json) names the step to run next and moves on only once its roll is done:
# a step interrupted anywhere (its files written or not, its roll half-way) is run again, whole, by the next
# `kctl cert rotate-ca`.

ROTATION_FILE = "ca-rotation.json"
ROTATION_STEPS = ("trust", "reissue", "drop")
BEFORE_STEP = {  # what the operator does before each step
    "trust": "",
    "reissue": "Give clients outside kctl secrets/trust.pem (both CAs) first, then `kctl cert rotate-ca` again: the"
               " brokers will serve certificates of the new CA",
    "drop": "Clients outside kctl that still trust only the old CA must take secrets/trust.pem before `kctl cert"
            " rotate-ca` again drops the old CA",
}


def rotation_step(state_dir: Path) -> str | None:
    """The rotation's next step, or None when no rotation is under way."""
    import json

    try:
        doc = json.loads((store.secrets_dir(state_dir) / ROTATION_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise KctlError(f"the CA rotation's record {store.secrets_dir(state_dir) / ROTATION_FILE} is unreadable:"
                        f" {exc}", hint="`kctl cert status` shows which CA signs each certificate; remove the file"
                                        " only once no step is half-done") from None
    step = doc.get("step") if isinstance(doc, dict) else None
    if step not in ROTATION_STEPS:
        raise KctlError(f"the CA rotation's record names no step ({doc!r})",
                        hint=f"its steps: {', '.join(ROTATION_STEPS)}")
    return str(step)


def _record_step(state_dir: Path, step: str | None) -> None:
    import json

    path = store.secrets_dir(state_dir) / ROTATION_FILE
    if step is None:
        path.unlink(missing_ok=True)
    else:
        store.write_secret(path, json.dumps({"step": step}) + "\n")


def _swap_cas(root: Path) -> None:
    """ca -> ca-old, ca-next -> ca, file by file in an order a rerun finishes from wherever it stopped."""
    import os

    for suffix in (".pem", ".key"):
        cur, old, nxt = (root / f"{n}{suffix}" for n in ("ca", store.OLD_CA, store.NEXT_CA))
        if nxt.exists():
            if cur.exists() and not old.exists():
                os.replace(cur, old)
            if not cur.exists():
                os.replace(nxt, cur)


def rotate_ca(spec: ClusterSpec, state_dir: Path, roll: Any, *, all_steps: bool = False,
              say: Any = None) -> list[str]:
    """Run the rotation's next step (``all_steps``: every step left), each ended by ``roll()`` (the gated rolling
    restart of every broker). The steps run; the record says what is next."""
    import datetime as _dt

    say = say or (lambda _m: None)
    if not spec.security.enabled or not spec.security.tls:
        raise KctlError(f"cluster {spec.name!r} serves no TLS: it has no CA to rotate",
                        hint="security.enabled with TLS in kctl.yaml (docs/security.md)")
    if spec.kraft_phase not in ("zookeeper", "kraft"):
        raise KctlError(f"cluster {spec.name!r} is migrating to KRaft (phase {spec.kraft_phase}): its CA is rotated"
                        " before or after the migration", hint="`kctl migrate kraft status`")
    root = store.secrets_dir(state_dir)
    if not (root / contract.CA_FILE).exists() and not (root / f"{store.NEXT_CA}.pem").exists():  # mid-swap: next
        raise KctlError(f"no CA in {root}: the cluster's secrets were never made here", hint="`kctl up` makes them")
    ran: list[str] = []
    step = rotation_step(state_dir)
    if step is None:
        if not (root / f"{store.NEXT_CA}.pem").exists():
            label = f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M:%S}"
            ca = pki.new_ca(spec.name, label)
            store.write_secret(root / f"{store.NEXT_CA}.key", ca.key_pem)
            store.write_secret(root / f"{store.NEXT_CA}.pem", ca.cert_pem)
            say(f"new CA made: kctl CA {spec.name} {label}")
        step = "trust"
        _record_step(state_dir, step)
    while step is not None:
        if step == "reissue":
            _swap_cas(root)  # ensure then makes again every certificate the new CA did not sign, with its keystore
        elif step == "drop":
            for suffix in (".pem", ".key"):
                (root / f"{store.OLD_CA}{suffix}").unlink(missing_ok=True)
        made = store.ensure(spec, state_dir)
        say(f"CA rotation, step {step}: " + (", ".join(made) or "the files were already written"))
        roll()
        ran.append(step)
        nxt = ROTATION_STEPS.index(step) + 1
        step = ROTATION_STEPS[nxt] if nxt < len(ROTATION_STEPS) else None
        _record_step(state_dir, step)
        if not all_steps:
            break
    return ran
