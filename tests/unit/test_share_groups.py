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


# `--describe --all-groups` and `--describe --all-groups --members` of Kafka 4.3.1 on four share groups (fg1 read
# while its producer ran; sg1 acknowledged every record of sq1-1 while its start offset stayed 0; sq2-1 and sq3-1
# not initialized yet; sg3 with one member), as the monitor's sampling reads them: one table a group.
ALL_OFFSETS = """
GROUP           TOPIC           PARTITION  START-OFFSET  LAG
fg1             fq1             0          11980         0

GROUP           TOPIC           PARTITION  START-OFFSET  LAG
sg1             sq1             0          0             50
sg1             sq1             1          0             0

GROUP           TOPIC           PARTITION  START-OFFSET  LAG
sg2             sq2             0          0             50
sg2             sq2             1          -             -
"""
ALL_MEMBERS = """
Share group 'fg1' has no active members.

Share group 'sg1' has no active members.

GROUP           CONSUMER-ID            HOST            CLIENT-ID       #PARTITIONS  ASSIGNMENT
sg3             v4YKId15RXqGWdaLVLFpjg /172.18.0.1     rdkafka         2            sq3:0,1

"""


def test_all_groups_tables_by_group() -> None:
    by = sg.parse_offsets_by_group(ALL_OFFSETS)
    assert sorted(by) == ["fg1", "sg1", "sg2"]
    assert [(p.topic, p.partition, p.start_offset, p.lag) for p in by["sg1"]] == [("sq1", 0, 0, 50), ("sq1", 1, 0, 0)]
    assert [(p.start_offset, p.lag) for p in by["sg2"]] == [(0, 50), (None, None)]
    members = sg.parse_members_by_group(ALL_MEMBERS)
    assert list(members) == ["sg3"] and members["sg3"][0].assignment == ["sq3-0", "sq3-1"]
    assert len(sg.parse_offsets(ALL_OFFSETS)) == 5  # one group's describe: the same parser


def test_sample_asks_no_tool_where_there_are_no_share_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    kraft = parse_spec({"name": "k", "metadata": "kraft", "versions": {"kafka": "4.3.1"}})[0].with_kraft("kraft", "x")
    asked: list[list[str]] = []

    def run(spec: object, args: list[str], timeout: float = 90) -> str:
        asked.append(args)
        if args[0] == "--list":
            return "GROUP           STATE\nsg1             Empty\nsg2             Stable\n"
        return ALL_OFFSETS if "--members" not in args else ALL_MEMBERS

    monkeypatch.setattr(sg, "_run", run)
    assert sg.sample(kraft, []) == [] and asked == []  # listed none: no describe
    got = sg.sample(kraft)
    assert [(d.group, d.state, d.total_lag) for d in got] == [("sg1", "EMPTY", 50), ("sg2", "STABLE", 50)]
    assert sorted(a[0] for a in asked) == ["--describe", "--describe", "--list"]  # three JVMs, whatever the groups
