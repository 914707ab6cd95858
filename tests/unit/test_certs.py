"""The secured profile's certificates on disk: `kctl cert status`, the monitor's `certificate` rule and the
renewal's files, on secrets made by kctl.security.store.ensure (no cluster)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl.model.spec import parse_spec
from kctl.monitor.service import Observation, firing
from kctl.security import certs, store


@pytest.fixture
def secured(tmp_path: Path) -> tuple[Any, Path, Path]:
    data = {"name": "certs", "security": {"enabled": True}}
    spec, _ = parse_spec(data)
    spec_file = tmp_path / "kctl.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    state = tmp_path / ".kctl" / "certs"
    store.ensure(spec, state)
    return spec, spec_file, state


def _short_lived(state: Path, host: str, days: float) -> None:
    """Replace ``host``'s certificate by one of the same CA that ends in ``days``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    root = store.secrets_dir(state)
    ca_key = serialization.load_pem_private_key((root / "ca.key").read_bytes(), None)
    ca = x509.load_pem_x509_certificate((root / "ca.pem").read_bytes())
    old = x509.load_pem_x509_certificate((root / "certs" / f"{host}.pem").read_bytes())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(old.subject).issuer_name(ca.subject).public_key(old.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=800))
            .not_valid_after(now + dt.timedelta(days=days))
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    store.write_secret(root / "certs" / f"{host}.pem", cert.public_bytes(serialization.Encoding.PEM))


def test_fresh_certificates_are_valid_signed_served_and_trusted(secured: Any) -> None:
    spec, _, state = secured
    found = {c.name: c for c in certs.inventory(spec, state)}
    assert set(found) == {"CA", "logger1", "logger2", "logger3"}
    for host in ("logger1", "logger2", "logger3"):
        c = found[host]
        assert c.problems == [] and c.signed_by_ca and c.keystore == "current" and c.trusts_ca
        assert 820 < c.days_left <= 825 and host in c.sans
    assert found["CA"].days_left > 3600
    assert certs.expiring(spec, state, 30) == {}


def test_an_expiring_certificate_is_named_by_status_the_rule_and_the_monitor(secured: Any) -> None:
    spec, spec_file, state = secured
    _short_lived(state, "logger2", 10)
    found = {c.name: c for c in certs.inventory(spec, state)}
    assert found["logger2"].problems[0].startswith("expires in 10.0 days")
    assert "keystore other certificate" in found["logger2"].problems  # the broker still serves the old one
    assert found["logger1"].problems == []
    late = certs.expiring(spec, state, 30)
    assert list(late) == ["certificate logger2"] and "expires in" in late["certificate logger2"]
    assert certs.expiring(spec, state, 5) == {}  # outside a 5-day warning
    fired = firing(Observation({}, {}, 3, {}, certificates=late), 85.0)
    assert fired == {("certificate", "certificate logger2"): late["certificate logger2"]}
    p = subprocess.run([sys.executable, "-m", "kctl", "cert", "status", "-o", "json", "-f", str(spec_file)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    doc = {c["name"]: c for c in json.loads(p.stdout)}
    assert doc["logger2"]["days_left"] < 11 and doc["logger1"]["problems"] == []
    _short_lived(state, "logger3", -1)
    assert certs.inventory(spec, state)[3].problems[0].startswith("expired on")


def test_renewal_keeps_the_ca_and_gives_new_certificates_and_keystores(secured: Any) -> None:
    spec, _, state = secured
    root = store.secrets_dir(state)
    ca_before = (root / "ca.pem").read_bytes()
    _short_lived(state, "logger2", 10)
    others = {h: (root / "certs" / f"{h}.pem").read_bytes() for h in ("logger1", "logger3")}
    made = certs.renew(spec, state, ["logger2"])
    assert "certificate of logger2" in made and "logger2/keystore.p12" in made
    assert (root / "ca.pem").read_bytes() == ca_before
    assert {h: (root / "certs" / f"{h}.pem").read_bytes() for h in ("logger1", "logger3")} == others
    found = {c.name: c for c in certs.inventory(spec, state)}
    assert found["logger2"].problems == [] and found["logger2"].days_left > 820
    with pytest.raises(Exception, match="no container logger9"):
        certs.renew(spec, state, ["logger9"])


def test_a_plain_cluster_has_no_certificates_to_show(tmp_path: Path) -> None:
    (tmp_path / "kctl.yaml").write_text(yaml.safe_dump({"name": "plain"}))
    p = subprocess.run([sys.executable, "-m", "kctl", "cert", "status", "-f", str(tmp_path / "kctl.yaml")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "is not secured" in p.stderr and "Traceback" not in p.stderr
    spec, _ = parse_spec({"name": "plain"})
    assert certs.expiring(spec, tmp_path, 30) == {}


def test_the_monitor_reads_them_again_once_renewed_and_exports_their_days(secured: Any) -> None:
    from kctl.monitor import api
    from kctl.monitor.service import Monitor

    spec, _, state = secured
    _short_lived(state, "logger1", 3)
    mon = Monitor(spec, state, interval_s=2, window=5, log=lambda _line: None)
    try:
        assert list(mon.certificates()) == ["certificate logger1"]
        text = api.prometheus_text(mon).decode()
        assert 'kctl_certificate_days_left{certificate="logger1",cluster="certs"} 2.99' in text or \
            'kctl_certificate_days_left{certificate="logger1",cluster="certs"} 3.0' in text
        certs.renew(spec, state, ["logger1"])
        assert mon.certificates() == {}  # the renewal changed the files: read again at once, not in an hour
        assert mon.certificate_days()["logger1"] > 820
    finally:
        mon.store.close()
