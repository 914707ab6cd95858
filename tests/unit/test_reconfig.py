"""ZooKeeper reconfig strings and the checks before a reconfig (pure: no ZooKeeper)."""

from __future__ import annotations

import pytest

from kctl.errors import UsageError
from kctl.model.properties import zoo_cfg_dynamic
from kctl.model.spec import parse_spec
from kctl.zk import reconfig as rc

CONFIG = """server.1=logger1:2888:3888:participant;0.0.0.0:2181
server.2=logger2:2888:3888:participant;0.0.0.0:2181
server.3=logger3:2888:3888:participant;0.0.0.0:2181
version=100000000
"""


def test_parse_the_config_znode() -> None:
    cfg = rc.parse_config(CONFIG)
    assert cfg.participants == [1, 2, 3] and cfg.observers == [] and cfg.version == "100000000"
    assert cfg.servers[2] == rc.Server(2, "logger2", 2888, 3888, "participant", 2181, "0.0.0.0")
    assert cfg.text.splitlines()[0] == "server.1=logger1:2888:3888:participant;0.0.0.0:2181"


@pytest.mark.parametrize("line,expected", [
    ("server.4=logger4:2888:3888:observer;2181", rc.Server(4, "logger4", 2888, 3888, "observer", 2181)),
    ("server.5=h:1:2", rc.Server(5, "h", 1, 2, "participant", None)),
    ("server.6=h:1:2:participant;10.0.0.1:2181", rc.Server(6, "h", 1, 2, "participant", 2181, "10.0.0.1")),
])
def test_server_lines_round_trip(line: str, expected: rc.Server) -> None:
    s = rc.parse_server(line)
    assert s == expected
    assert rc.parse_server(s.line) == s


@pytest.mark.parametrize("bad", ["logger4:2888:3888", "server.x=h:1:2", "server.4=h:1", "server.4=h:1:2:leader",
                                 "server.0=h:1:2"])
def test_malformed_server_lines(bad: str) -> None:
    with pytest.raises(UsageError) as e:
        rc.parse_server(bad)
    assert "server." in (e.value.hint or "") or "above 0" in e.value.message


def test_the_rendered_dynamic_file_is_what_reconfig_builds() -> None:
    spec, _ = parse_spec({"nodes": [{"id": i, "hostname": f"logger{i}"} for i in (1, 2, 3)]
                          + [{"id": 4, "hostname": "logger4", "role": "observer"}]})
    dynamic = zoo_cfg_dynamic(spec)
    assert dynamic["server.4"] == "logger4:2888:3888:observer;2181"
    assert rc.server_of(spec, 4).line == "server.4=" + dynamic["server.4"]
    assert rc.server_of(spec, 1).line == "server.1=" + dynamic["server.1"]


def test_adding_an_observer_is_fine() -> None:
    after, warnings = rc.check(rc.parse_config(CONFIG), add=[rc.parse_server("server.4=l4:2888:3888:observer;2181")],
                               live=[1, 2, 3, 4])
    assert after.participants == [1, 2, 3] and after.observers == [4] and warnings == []


def test_an_even_participant_count_needs_force() -> None:
    p4 = rc.parse_server("server.4=l4:2888:3888:participant;2181")
    with pytest.raises(UsageError, match="4 participants: an even ensemble") as e:
        rc.check(rc.parse_config(CONFIG), add=[p4], live=[1, 2, 3, 4])
    assert "--force" in (e.value.hint or "")
    after, warnings = rc.check(rc.parse_config(CONFIG), add=[p4], live=[1, 2, 3, 4], force=True)
    assert after.participants == [1, 2, 3, 4] and "even" in warnings[0]
    with pytest.raises(UsageError, match="2 participants"):
        rc.check(rc.parse_config(CONFIG), remove=[3], live=[1, 2, 3])


def test_no_quorum_is_refused_even_with_force() -> None:
    five = CONFIG + "server.4=l4:2888:3888:participant;2181\nserver.5=l5:2888:3888:participant;2181\n"
    with pytest.raises(UsageError, match="needs 2 of them up .* only 1 answer"):
        rc.check(rc.parse_config(five), remove=[4, 5], live=[1, 4, 5], force=True)
    p4 = rc.parse_server("server.4=l4:2888:3888:participant;2181")
    p5 = rc.parse_server("server.5=l5:2888:3888:participant;2181")
    # 5 participants need 3 up: only the two joiners answer.
    with pytest.raises(UsageError, match="needs 3 .* only 2 answer"):
        rc.check(rc.parse_config(CONFIG), add=[p4, p5], live=[4, 5])
    # A joiner must be running before it is added (a dead member would count against the quorum).
    with pytest.raises(UsageError, match="joining server.* 5 do not answer"):
        rc.check(rc.parse_config(CONFIG), add=[p4, p5], live=[1, 2, 3, 4])
    rc.check(rc.parse_config(CONFIG), add=[p4, p5], live=[1, 2, 3, 4, 5])


def test_membership_mistakes() -> None:
    cfg = rc.parse_config(CONFIG)
    with pytest.raises(UsageError, match="server 9 is not in the ensemble"):
        rc.check(cfg, remove=[9])
    with pytest.raises(UsageError, match="already in the ensemble"):
        rc.check(cfg, add=[rc.parse_server("server.2=x:1:2")])
    with pytest.raises(UsageError, match="no participant"):
        rc.check(cfg, remove=[1, 2, 3], add=[rc.parse_server("server.4=l4:1:2:observer")])
    with pytest.raises(UsageError, match="nothing to change"):
        rc.check(cfg)
