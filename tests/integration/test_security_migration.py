"""docs/security.md's offline move of a PLAINTEXT cluster to the secured profile, as written: data kept,
then Kafka's zookeeper-security-migration makes the old znodes' ACLs secure."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.long]


def kctl(cwd: Path, *args: str, stdin: str | None = None, timeout: float = 900) -> str:
    p = subprocess.run([sys.executable, "-m", "kctl", *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"kctl {' '.join(args)}: {p.stderr[-1500:]}"
    return p.stdout


def test_plaintext_cluster_moves_to_the_secured_profile_without_losing_data(tmp_path: Path) -> None:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    from kctl.model.spec import load_spec, state_dir_for
    from kctl.zk.znodes import sasl_options

    name = f"mig{uuid.uuid4().hex[:6]}"
    kctl(tmp_path, "init", "--name", name)
    try:
        kctl(tmp_path, "up")
        lines = [f"record-{i}" for i in range(200)]
        kctl(tmp_path, "topic", "create", "orders", "-p", "3", "-r", "3")
        kctl(tmp_path, "produce", "orders", stdin="\n".join(lines) + "\n")
        kctl(tmp_path, "down")  # containers removed; data kept

        spec_file = tmp_path / "kctl.yaml"
        data = yaml.safe_load(spec_file.read_text())
        data["security"] = {"enabled": True}
        spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
        kctl(tmp_path, "up")
        got = kctl(tmp_path, "consume", "orders", "--from-beginning", "--max", "200", "--timeout", "30")
        assert sorted(got.split()) == sorted(lines)  # every record, read back over SASL_SSL as the admin user

        spec, _ = load_spec(spec_file)
        spec = spec.model_copy(update={"state_dir": str(state_dir_for(spec, spec_file))})
        zk = KazooClient(hosts=spec.zookeeper_connect_host, timeout=8, **sasl_options(spec))
        zk.start(timeout=10)
        try:
            before = zk.get_acls("/brokers/topics/orders")[0]
            assert any(a.id.scheme == "world" and a.perms == 31 for a in before)  # made while PLAINTEXT: open
            tool = "/opt/kafka/bin/zookeeper-security-migration.sh"  # as docs/security.md runs it
            p = subprocess.run(["docker", "exec", f"kctl-{name}-logger1-1", tool, "--zookeeper.acl=secure",
                                "--zookeeper.connect=logger1:2181"], capture_output=True, text=True, timeout=180)
            assert p.returncode == 0, p.stderr[-1500:]
            after = zk.get_acls("/brokers/topics/orders")[0]
            assert {(a.id.scheme, a.id.id, a.perms) for a in after} == {("sasl", "kafka", 31), ("world", "anyone", 1)}
            with pytest.raises(NoAuthError):
                zk.set("/brokers/topics/orders", b"{}")
        finally:
            zk.stop()
            zk.close()
        assert "HEALTHY" in kctl(tmp_path, "status")
    finally:
        subprocess.run([sys.executable, "-m", "kctl", "down", "--volumes"], cwd=tmp_path, capture_output=True,
                       timeout=300)
