"""kctl.kafka.share_groups' parsers, on the tables Kafka 4.3.1's ShareGroupCommand printed for a real share group."""

from __future__ import annotations

import pytest

from kctl.errors import UsageError
from kctl.kafka import share_groups as sg
from kctl.model.spec import parse_spec

LIST = "GROUP           STATE\nsg1             Stable\nother           Empty\n"
STATE = ("\nGROUP           COORDINATOR (ID)          STATE           #MEMBERS\n"
         "sg1             logger1:9092  (1)         Stable          1\n")
MEMBERS = ("\nGROUP           CONSUMER-ID            HOST            CLIENT-ID       #PARTITIONS  ASSIGNMENT\n"
           "sg1             NYVy9jQtQYi+dKhutETSqQ /192.168.16.1   rdkafka         2            sq:0,1\n")
IDLE_MEMBER = ("\nGROUP           CONSUMER-ID            HOST            CLIENT-ID       #PARTITIONS  ASSIGNMENT\n"
               "sg1             tg2zjLyeT2KlWR89biKnOQ /192.168.16.1   rdkafka         0            \n")
OFFSETS = ("\nGROUP           TOPIC           PARTITION  START-OFFSET  LAG\n"
           "sg1             sq              0          102           42\n"
           "sg1             sq              1          -             -\n")
RESET = ("\nGROUP                          TOPIC                          PARTITION  NEW-OFFSET\n"
         "sg1                            sq                             1          0\n"
         "sg1                            sq                             0          0\n")


def test_list_and_state() -> None:
    assert sg.parse_list(LIST) == [("other", "EMPTY"), ("sg1", "STABLE")]
    assert sg.parse_list("GROUP           STATE\n") == []
    assert sg.parse_state(STATE) == ("STABLE", 1)
    assert sg.parse_state("\nError: Share group 'x' does not exist.\n") == ("DEAD", None)


def test_members_with_and_without_partitions() -> None:
    [m] = sg.parse_members(MEMBERS)
    assert (m.consumer_id, m.host, m.client_id, m.assignment) == ("NYVy9jQtQYi+dKhutETSqQ", "/192.168.16.1",
                                                                  "rdkafka", ["sq-0", "sq-1"])
    [idle] = sg.parse_members(IDLE_MEMBER)
    assert idle.assignment == []
    two = sg.parse_members(MEMBERS.replace("sq:0,1", "a:2;b:0,1"))
    assert two[0].assignment == ["a-2", "b-0", "b-1"]


def test_offsets_with_an_uninitialized_partition() -> None:
    parts = sg.parse_offsets(OFFSETS)
    assert [(p.topic, p.partition, p.start_offset, p.lag) for p in parts] == [("sq", 0, 102, 42), ("sq", 1, None, None)]
    assert sg.parse_offsets("\nShare group 'sg1' has no offset information.\n") == []


def test_reset_table_and_datetime() -> None:
    assert sg.parse_reset(RESET) == [{"topic": "sq", "partition": 1, "target": 0},
                                     {"topic": "sq", "partition": 0, "target": 0}]
    assert sg.tool_datetime("2026-12-05T10:00:00") == "2026-12-05T10:00:00.000Z"
    assert sg.tool_datetime("2026-12-05T10:00:00+01:00") == "2026-12-05T09:00:00.000Z"
    with pytest.raises(UsageError):
        sg.tool_datetime(None)


def test_which_clusters_have_share_groups() -> None:
    zk, _ = parse_spec({"name": "z"})
    assert not sg.supported(zk)
    with pytest.raises(UsageError, match="need Kafka 4.1 or newer on KRaft"):
        sg.require_supported(zk)
    assert sg.list_groups(zk) == []  # nothing asked of a cluster that has none
