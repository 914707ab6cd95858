"""`kctl cert rotate-ca` on secrets made by kctl.security.store.ensure (no cluster): at every roll each container's
certificate, old or new, is trusted by every container and by the clients' trust.pem (no client refused in
between); an interruption anywhere is finished by the next run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs12

from kctl.errors import KctlError
from kctl.model.spec import parse_spec
from kctl.security import certs, store

HOSTS = ("logger1", "logger2", "logger3")


@pytest.fixture
def secured(tmp_path: Path) -> tuple[Any, Path]:
    data = {"name": "rot", "security": {"enabled": True}}
    spec, _ = parse_spec(data)
    (tmp_path / "kctl.yaml").write_text(yaml.safe_dump(data))
    state = tmp_path / ".kctl" / "rot"
    store.ensure(spec, state)
    return spec, state


def bundle(path: Path) -> list[x509.Certificate]:
    return list(x509.load_pem_x509_certificates(path.read_bytes()))


def signer(cert: x509.Certificate, cas: list[x509.Certificate]) -> x509.Certificate | None:
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
            return ca
        except Exception:  # noqa: BLE001 - not this one
            continue
    return None


def leaf(root: Path, host: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate((root / "certs" / f"{host}.pem").read_bytes())


def served(spec: Any, state: Path, host: str) -> x509.Certificate:
    pw = store.passwords(spec, state)[store.KEYSTORE]
    _k, cert, _chain = pkcs12.load_key_and_certificates(
        (store.secrets_dir(state) / host / "keystore.p12").read_bytes(), pw.encode())
    assert cert is not None
    return cert


def test_three_steps_and_nobody_refused_at_any_roll(secured: Any) -> None:
    spec, state = secured
    root = store.secrets_dir(state)
    first = x509.load_pem_x509_certificate((root / "ca.pem").read_bytes())
    before = {h: served(spec, state, h) for h in HOSTS}  # what the brokers serve until their restart
    seen: list[dict[str, Any]] = []

    def roll() -> None:
        # mid-roll, some brokers serve what they served before this step, the rest what the step wrote
        step = certs.rotation_step(state)
        now = {h: served(spec, state, h) for h in HOSTS}
        for who in (*HOSTS, "client"):
            trusted = bundle(root / "trust.pem") if who == "client" else bundle(root / who / "ca.pem")
            for h in HOSTS:
                for cert in (before[h], now[h]):
                    assert signer(cert, trusted) is not None, (step, who, h)
        seen.append({"step": step, "trusted": len(bundle(root / "trust.pem")),
                     "signer": {h: signer(now[h], [first]) is not None for h in HOSTS}})
        before.update(now)

    ran = []
    for _ in range(3):  # one step per run, as the operator runs it
        ran += certs.rotate_ca(spec, state, roll)
    assert ran == ["trust", "reissue", "drop"] and [s["step"] for s in seen] == ran
    assert [s["trusted"] for s in seen] == [2, 2, 1]
    assert seen[0]["signer"] == dict.fromkeys(HOSTS, True)  # trust: still the first CA's certificates
    assert seen[1]["signer"] == dict.fromkeys(HOSTS, False)  # reissue: the new CA's
    new = x509.load_pem_x509_certificate((root / "ca.pem").read_bytes())
    assert new != first and new.subject != first.subject
    for h in HOSTS:
        assert bundle(root / h / "ca.pem") == [new] and signer(leaf(root, h), [new]) is new
        assert served(spec, state, h) == leaf(root, h)
    assert bundle(root / "trust.pem") == [new] and store.client_ca_file(state) == root / "trust.pem"
    assert certs.rotation_step(state) is None
    assert not [f.name for f in root.iterdir() if f.name.startswith(("ca-next", "ca-old", "ca-rotation"))]
    found = {c.name: c for c in certs.inventory(spec, state)}
    assert all(found[h].problems == [] and found[h].trusts_ca for h in HOSTS), found


def test_all_steps_in_one_run(secured: Any) -> None:
    spec, state = secured
    rolls: list[str | None] = []
    assert certs.rotate_ca(spec, state, lambda: rolls.append(certs.rotation_step(state)), all_steps=True) == [
        "trust", "reissue", "drop"]
    assert rolls == ["trust", "reissue", "drop"] and certs.rotation_step(state) is None


@pytest.mark.parametrize("stop_in", ["trust", "reissue", "drop"])
def test_an_interrupted_roll_is_run_again_by_the_next_run(secured: Any, stop_in: str) -> None:
    spec, state = secured
    calls: list[str | None] = []

    def roll() -> None:
        step = certs.rotation_step(state)
        calls.append(step)
        if step == stop_in and calls.count(step) == 1:
            raise KeyboardInterrupt  # Ctrl-C in the roll

    for _ in range(4):
        try:
            certs.rotate_ca(spec, state, roll, all_steps=True)
            break
        except KeyboardInterrupt:
            assert certs.rotation_step(state) == stop_in  # not moved on: the step is done again
    assert calls.count(stop_in) == 2 and certs.rotation_step(state) is None
    root = store.secrets_dir(state)
    new = x509.load_pem_x509_certificate((root / "ca.pem").read_bytes())
    assert all(bundle(root / h / "ca.pem") == [new] and signer(leaf(root, h), [new]) for h in HOSTS)


@pytest.mark.parametrize("done", [1, 2, 3])
def test_a_swap_of_the_cas_cut_short_is_finished(secured: Any, done: int) -> None:
    import os

    spec, state = secured
    root = store.secrets_dir(state)
    certs.rotate_ca(spec, state, lambda: None)  # trust done: ca-next made
    nxt = (root / "ca-next.pem").read_bytes()
    # kctl killed in the middle of the swap: the first `done` renames made
    renames = [("ca.pem", "ca-old.pem"), ("ca-next.pem", "ca.pem"), ("ca.key", "ca-old.key")]
    for src, dst in renames[:done]:
        os.replace(root / src, root / dst)
    certs.rotate_ca(spec, state, lambda: None)  # reissue again
    assert (root / "ca.pem").read_bytes() == nxt and (root / "ca-old.pem").exists() and (root / "ca-old.key").exists()
    new = x509.load_pem_x509_certificate(nxt)
    assert all(signer(leaf(root, h), [new]) for h in HOSTS)


def test_refused_without_tls_and_with_a_damaged_record(tmp_path: Path, secured: Any) -> None:
    plain, _ = parse_spec({"name": "plain"})
    with pytest.raises(KctlError, match="serves no TLS"):
        certs.rotate_ca(plain, tmp_path, lambda: None)
    spec, state = secured
    (store.secrets_dir(state) / certs.ROTATION_FILE).write_text("{")
    with pytest.raises(KctlError, match="unreadable"):
        certs.rotate_ca(spec, state, lambda: None)
