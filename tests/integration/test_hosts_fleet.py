"""The test hosts of the "plain hosts with systemd" target (tests/hosts/fleet.py): systemd as PID 1, sshd with
this run's key, hosts that resolve each other by name, enabled services back after a host restart, a host
without systemd that says so, and nothing left behind. A few seconds once the image is built."""

from __future__ import annotations

import docker
import pytest

from tests.hosts.fleet import LABEL, Fleet

pytestmark = pytest.mark.integration

UNIT = """\
[Unit]
Description=kctl test probe

[Service]
ExecStart=/bin/sleep infinity
Restart=on-failure
RestartSec=200ms

[Install]
WantedBy=multi-user.target
"""


def _main_pid(fleet: Fleet, hostname: str) -> str:
    return fleet.ssh(hostname, "systemctl show -p MainPID --value kctl-probe.service", check=True).stdout.strip()


def _wait_active(fleet: Fleet, hostname: str) -> None:
    # systemd's own bounded wait: the unit is active, or it is not after 10 s
    probe = fleet.ssh(hostname, "for i in $(seq 50); do systemctl is-active -q kctl-probe.service && exit 0; "
                                "sleep 0.2; done; systemctl status --no-pager kctl-probe.service; exit 1")
    assert probe.returncode == 0, probe.stdout + probe.stderr


def test_fleet_of_systemd_hosts_over_ssh() -> None:
    fleet = Fleet(["logger1", "logger2"])
    with fleet:
        assert fleet.key_path.stat().st_mode & 0o777 == 0o600
        for host in fleet:
            assert (host.user, host.port, host.key_path) == ("ops", 22, fleet.key_path)
            # the real ssh client, this run's key, the host's bridge address
            login = fleet.ssh(host.hostname, "hostname; sudo -n systemctl is-system-running")
            assert login.returncode == 0, login.stderr
            name, state = login.stdout.split()
            assert name == host.hostname
            assert state in ("running", "degraded"), login.stdout
        assert fleet.ssh("logger1", "getent hosts logger2").stdout.split() == [fleet["logger2"].ip, "logger2"]
        # each host its own machine id, as real hosts (kctl refuses two nodes on one machine)
        ids = {fleet.ssh(h.hostname, "cat /etc/machine-id", check=True).stdout.strip() for h in fleet}
        assert len(ids) == 2 and all(len(i) == 32 for i in ids), ids
        keys = fleet.exec("logger1", ["stat", "-c", "%U %a %n", "/home/ops/.ssh", "/home/ops/.ssh/authorized_keys"])
        assert keys.stdout.split("\n")[:2] == ["ops 700 /home/ops/.ssh", "ops 600 /home/ops/.ssh/authorized_keys"]
        # no password login: the key alone
        assert "passwordauthentication no" in fleet.exec("logger1", ["sshd", "-T"]).stdout

        # a service installed over ssh the way kctl will: a unit file, enabled, started
        installed = fleet.ssh("logger1", "sudo -n tee /etc/systemd/system/kctl-probe.service >/dev/null && "
                                         "sudo -n systemctl daemon-reload && "
                                         "sudo -n systemctl enable --now kctl-probe.service", input=UNIT)
        assert installed.returncode == 0, installed.stderr
        _wait_active(fleet, "logger1")
        # Restart=on-failure: a killed service comes back
        pid = _main_pid(fleet, "logger1")
        assert fleet.ssh("logger1", f"sudo -n kill -9 {pid}").returncode == 0
        _wait_active(fleet, "logger1")
        assert _main_pid(fleet, "logger1") not in ("0", pid)

        # a restart of the host: /run starts empty (systemd's tmpfs), the enabled service is active again
        fleet.ssh("logger1", "sudo -n touch /run/kctl-before-restart", check=True)
        fleet.restart("logger1")
        assert fleet.exec("logger1", ["test", "-e", "/run/kctl-before-restart"]).returncode == 1
        _wait_active(fleet, "logger1")
        assert fleet.ssh("logger1", "systemctl is-enabled kctl-probe.service").stdout.strip() == "enabled"

        # a host without systemd: ssh and sudo work, systemctl says it is not a systemd host
        plain = fleet.start_without_systemd("plain1")
        assert not plain.systemd
        no_systemd = fleet.ssh("plain1", "hostname && sudo -n systemctl is-system-running")
        assert no_systemd.stdout.split()[0] == "plain1"
        assert no_systemd.returncode != 0, no_systemd.stdout
        key_dir = fleet.key_dir
    assert key_dir is not None and not key_dir.exists()

    fleet.close()  # a second close is a no-op
    client = docker.from_env()
    try:
        selector: dict[str, str | list[str] | bool] = {"label": f"{LABEL}={fleet.run_id}"}
        assert client.containers.list(all=True, filters=selector) == []
        assert client.networks.list(filters=selector) == []
    finally:
        client.close()
