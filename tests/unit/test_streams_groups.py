"""kctl.kafka.streams_groups' parsers, on what Kafka 4.3.1's StreamsGroupCommand printed for a real streams group
(WordCountDemo from kafka-streams-examples 4.3.1 with group.protocol=streams: two subtopologies, two partitions
each), running and then stopped."""

from __future__ import annotations

from kctl.kafka import streams_groups as st
from kctl.model.spec import parse_spec

LIST = "GROUP           STATE\nwc-app          Stable\nother           NotReady\n"
MEMBERS = (
    "GROUP           MEMBER                 PROCESS                              CLIENT-ID"
    "                                                           ASSIGNMENTS\n"
    "wc-app          EpH-YgEERFq8bbsbykfk-g e159b485-4385-494a-9848-a0e1f72f4855"
    " wc-app-e159b485-4385-494a-9848-a0e1f72f4855-StreamThread-1-consumer ACTIVE: 0:[0,1]; 1:[0,1]; \n")
STATE = ("GROUP           COORDINATOR (ID)          STATE                     #MEMBERS\n"
         "wc-app          logger1:9092 (1)          Stable                    1\n")
STATE_EMPTY = ("\nError: Streams group 'wc-app' has no active members.\n"
               "GROUP           COORDINATOR (ID)          STATE                     #MEMBERS\n"
               "wc-app          logger1:9092 (1)          Empty                     0\n")
MISSING = ("\nError: Executing streams group command failed due to org.apache.kafka.common.errors."
           "GroupIdNotFoundException: Group nosuch not found.\n"
           "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.GroupIdNotFoundException: Group"
           " nosuch not found.\n\tat java.base/java.util.concurrent.CompletableFuture.reportGet(CompletableFuture.java"
           ":396)\n")


def test_list_and_states() -> None:
    assert st.parse_list(LIST) == [("other", "NOT_READY"), ("wc-app", "STABLE")]
    assert st.parse_list("GROUP           STATE\n") == []
    assert st.parse_state(STATE) == ("STABLE", 1, 1)
    assert st.parse_state(STATE_EMPTY) == ("EMPTY", 1, 0)  # the tool's "Error:" notice of an empty group
    assert st.parse_state(MISSING) == ("DEAD", None, 0)


def test_members_and_their_tasks() -> None:
    [m] = st.parse_members(MEMBERS)
    assert m.member_id == "EpH-YgEERFq8bbsbykfk-g" and m.process == "e159b485-4385-494a-9848-a0e1f72f4855"
    assert m.client_id.endswith("-StreamThread-1-consumer")
    assert (m.active, m.standby, m.warmup) == (["0_0", "0_1", "1_0", "1_1"], [], [])
    [two] = st.parse_members(MEMBERS.replace("ACTIVE: 0:[0,1]; 1:[0,1]; ", "ACTIVE: 0:[1]; STANDBY: 1:[0]; "))
    assert (two.active, two.standby) == (["0_1"], ["1_0"])
    assert st.parse_members("\n\n") == []  # an empty group's --members prints nothing


def test_a_release_without_streams_groups_is_asked_nothing() -> None:
    zk, _ = parse_spec({"name": "z"})
    old = parse_spec({"name": "k", "metadata": "kraft", "versions": {"kafka": "3.9.1"}})[0].with_kraft("kraft", "x")
    assert not st.supported(zk) and not st.supported(old)
    assert st.list_groups(zk) == []
