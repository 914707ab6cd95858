"""A KIP-848 consumer group's epochs parsed from Kafka 4.3.1's kafka-consumer-groups.sh (its own output, captured
from a one-node cluster: two members, then one, then none)."""

from __future__ import annotations

import pytest

from kctl.kafka import consumer_epochs as ce
from kctl.kafka.groups import GroupDescription, Member

STATE = """
GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                GROUP-EPOCH     TARGET-ASSIGNMENT-EPOCH   #MEMBERS
billing         logger1:9092  (1)         uniform              Stable               3               3                         2
"""  # noqa: E501

MEMBERS = """
GROUP           CONSUMER-ID            HOST            CLIENT-ID       #PARTITIONS     CURRENT-EPOCH   CURRENT-ASSIGNMENT   TARGET-EPOCH    TARGET-ASSIGNMENT   
billing         wRf8E6aZQvmrtIALscjI4Q /172.30.0.1     billing-0       1               3               orders:2             3               orders:2            
billing         OEkacAQzR12o1LNPsHNZ8g /172.30.0.1     billing-1       2               3               orders:0,1           3               orders:0,1          
"""  # noqa: E501, W291

EMPTY = """
Consumer group 'billing' has no active members.

GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     CURRENT-EPOCH   CURRENT-ASSIGNMENT   TARGET-EPOCH    TARGET-ASSIGNMENT   
"""  # noqa: E501, W291


def test_the_group_epoch_and_the_target_assignment_epoch_are_read_by_their_headers() -> None:
    assert ce.parse_state(STATE) == (3, 3)
    reconciling = STATE.replace("Stable               3               3 ", "Reconciling          5               5 ")
    assert ce.parse_state(reconciling) == (5, 5)


def test_each_member_has_its_current_and_target_epoch() -> None:
    assert ce.parse_members(MEMBERS) == {"wRf8E6aZQvmrtIALscjI4Q": (3, 3), "OEkacAQzR12o1LNPsHNZ8g": (3, 3)}


def test_a_group_without_members_or_a_table_that_does_not_line_up_gives_nothing_rather_than_a_misread() -> None:
    assert ce.parse_members(EMPTY) == {}
    assert ce.parse_members(MEMBERS.replace("billing-0  ", "billing 0  ")) == {"OEkacAQzR12o1LNPsHNZ8g": (3, 3)}
    assert ce.parse_state("Error: Consumer group 'x' does not exist.\n") == (None, None)
    assert ce.parse_members("GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS\nbilling m /h c 1\n") == {}  # not verbose


def test_attach_puts_the_epochs_on_the_description_and_its_members(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ce, "read", lambda spec, group: ce.Epochs(7, 7, {"m1": (7, 7), "m2": (6, 7)}))
    d = GroupDescription("billing", "RECONCILING", 1, "uniform",
                         [Member("m1", "c1", "/h", ["orders-0"]), Member("m2", "c2", "/h", ["orders-1"]),
                          Member("m3", "c3", "/h", [])], type="consumer")
    ce.attach(None, d)  # type: ignore[arg-type]
    assert (d.group_epoch, d.target_assignment_epoch) == (7, 7)
    assert [(m.member_epoch, m.target_epoch) for m in d.members] == [(7, 7), (6, 7), (None, None)]
