"""engine swarm's node add: the stack file of the one new service (pure)."""

from __future__ import annotations

import pytest

from kctl.errors import KctlError
from kctl.runtime.engine.swarm import one_service_stack


def _stack() -> dict:
    svc = {
        "image": "kctl/node:3.9.1",
        "volumes": ["logger{n}-data:/var/opt/kctl", "logger{n}-logs:/var/log/kctl"],
        "configs": [{"mode": 292, "source": "logger{n}-zoo-cfg", "target": "/etc/kctl/zoo.cfg"}],
        "networks": ["cluster"],
    }

    def of(n: int) -> dict:
        return {k: ([{**c, "source": c["source"].format(n=n)} if isinstance(c, dict) else c.format(n=n)
                     for c in v] if isinstance(v, list) else v) for k, v in svc.items()}

    return {
        "name": "kctl-x",
        "services": {f"logger{n}": of(n) for n in (1, 2, 3, 4)},
        "networks": {"cluster": {"name": "kctl-x", "driver": "overlay"}},
        "volumes": {f"logger{n}-{k}": {"labels": {}} for n in (1, 2, 3, 4) for k in ("data", "logs")},
        "configs": {f"logger{n}-zoo-cfg": {"file": f"logger{n}/conf/zoo.cfg", "name": f"h{n}"} for n in (1, 2, 3, 4)},
    }


def test_the_new_services_stack_holds_only_it_and_what_it_uses() -> None:
    one = one_service_stack(_stack(), "logger4")
    assert list(one["services"]) == ["logger4"]
    assert list(one["configs"]) == ["logger4-zoo-cfg"] and one["configs"]["logger4-zoo-cfg"]["name"] == "h4"
    assert sorted(one["volumes"]) == ["logger4-data", "logger4-logs"]
    assert one["networks"] == {"cluster": {"name": "kctl-x", "driver": "overlay"}} and one["name"] == "kctl-x"


def test_a_host_the_stack_file_lacks_is_refused() -> None:
    with pytest.raises(KctlError, match="no service logger9"):
        one_service_stack(_stack(), "logger9")
