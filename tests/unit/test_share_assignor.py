"""The share-group assignor (coordinator/share/assignor.py) against the rules of Kafka 4.2's
``simple`` assignor, as its source states them (apache/kafka, group-coordinator/src/main/java/
org/apache/kafka/coordinator/group/assignor/SimpleHomogeneousAssignmentBuilder.java and
SimpleHeterogeneousAssignmentBuilder.java):

* ``desiredSharing = (numGroupMembers + numTargetPartitions - 1) / numTargetPartitions``: a
  partition is shared only when members outnumber partitions, by ``ceil(M / P)`` members;
* ``desiredAssignmentCount``: the ``desiredSharing * P`` assignments spread so that "the
  difference in assignments sizes between any two members should not exceed one partition";
* "Balance is prioritized above stickiness"; stickiness: "Minimize partition movements among
  members by retaining as much of the existing assignment as possible";
* heterogeneous subscriptions: "balance is computed for each topic individually and then the
  assignments are combined. So, if M1 is subscribed to T1, M2 is subscribed to T2, and M3 is
  subscribed to T1 and T2, M3 will get assigned half of the partitions for T1 and half of the
  partitions for T2."

Before: every member was given every partition of its topics (librdkafka's 0172
``do_test_mixed_ack_mode_same_group``: two members on 4 partitions, all 400 records to one).
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.coordinator.share.assignor import assign

T1, T2, T3 = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


def _count(a: dict[uuid.UUID, frozenset[int]]) -> int:
    return sum(len(ps) for ps in a.values())


def _holders(result: dict[str, dict[uuid.UUID, frozenset[int]]], t: uuid.UUID, p: int) -> list[str]:
    return [m for m, a in result.items() if p in a.get(t, ())]


def test_two_members_on_four_partitions_get_two_each_and_none_shared() -> None:
    """librdkafka 0172's mixed-ack-mode group: an implicit and an explicit member, 4 partitions."""
    subs = {"implicit": frozenset({T1}), "explicit": frozenset({T1})}
    out = assign(subs, {}, {T1: 4})
    assert [_count(out[m]) for m in sorted(out)] == [2, 2]
    assert out["implicit"][T1] | out["explicit"][T1] == set(range(4))
    assert not out["implicit"][T1] & out["explicit"][T1]


def test_more_members_than_partitions_share_each_partition_by_ceil_m_over_p() -> None:
    subs = {f"m{i}": frozenset({T1}) for i in range(5)}
    out = assign(subs, {}, {T1: 2})
    sharing = (5 + 2 - 1) // 2  # Kafka's desiredSharing: 3
    assert [len(_holders(out, T1, p)) for p in range(2)] == [sharing, sharing]
    counts = sorted(_count(a) for a in out.values())
    assert counts == [1, 1, 1, 1, 2]  # the 6 assignments spread, any two differ by at most one


def test_one_member_gets_everything_and_the_homogeneous_pool_spans_topics() -> None:
    assert assign({"a": frozenset({T1, T3})}, {}, {T1: 3, T3: 2}) == {"a": {T1: frozenset({0, 1, 2}), T3: frozenset({0, 1})}}
    out = assign({"a": frozenset({T1, T3}), "b": frozenset({T1, T3})}, {}, {T1: 3, T3: 2})
    assert sorted(_count(a) for a in out.values()) == [2, 3]  # 5 partitions over 2 members, as one pool


def test_heterogeneous_subscriptions_are_balanced_per_topic() -> None:
    """Kafka's example: M1 on T1, M2 on T2, M3 on T1 and T2: M3 gets half of each."""
    out = assign({"M1": frozenset({T1}), "M2": frozenset({T2}), "M3": frozenset({T1, T2})}, {}, {T1: 4, T2: 4})
    assert len(out["M1"][T1]) == len(out["M3"][T1]) == 2 and len(out["M2"][T2]) == len(out["M3"][T2]) == 2
    assert T2 not in out["M1"] and T1 not in out["M2"]


def test_a_member_joining_moves_only_what_balance_needs() -> None:
    subs = {"a": frozenset({T1}), "b": frozenset({T1})}
    first = assign(subs, {}, {T1: 4})
    second = assign({**subs, "c": frozenset({T1})}, first, {T1: 4})
    assert sorted(_count(a) for a in second.values()) == [1, 1, 2]
    for m in ("a", "b"):  # the old members keep a subset of what they had
        assert second[m][T1] <= first[m][T1]
    moved = sum(len(first[m][T1] - second[m][T1]) for m in ("a", "b"))
    assert moved == 1 and _count(second["c"]) == 1


def test_a_member_leaving_hands_out_only_its_own_partitions() -> None:
    subs = {m: frozenset({T1}) for m in "abc"}
    first = assign(subs, {}, {T1: 6})
    second = assign({"a": subs["a"], "b": subs["b"]}, first, {T1: 6})
    for m in "ab":
        assert first[m][T1] <= second[m][T1]
    assert second["a"][T1] | second["b"][T1] == set(range(6)) and [_count(second[m]) for m in "ab"] == [3, 3]


def test_a_member_unsubscribing_from_a_topic_loses_its_partitions() -> None:
    first = assign({"a": frozenset({T1, T2}), "b": frozenset({T1, T2})}, {}, {T1: 2, T2: 2})
    second = assign({"a": frozenset({T1}), "b": frozenset({T1, T2})}, first, {T1: 2, T2: 2})
    assert T2 not in second["a"] and second["b"][T2] == {0, 1}


@settings(max_examples=300, deadline=None)
@given(members=st.integers(1, 12), topics=st.lists(st.integers(1, 7), min_size=1, max_size=3),
       churn=st.lists(st.booleans(), max_size=12), seed=st.integers(0, 10**6))
def test_balance_and_sharing_hold_for_any_group(members: int, topics: list[int], churn: list[bool], seed: int) -> None:
    """Homogeneous groups, from scratch and after members come and go: every partition has
    between 1 and desiredSharing members, a member at most once per partition, and any two
    members' counts differ by at most one."""
    import random

    rng = random.Random(seed)
    tids = [uuid.UUID(int=100 + i) for i in range(len(topics))]
    counts = dict(zip(tids, topics))
    names = [f"m{i}" for i in range(members)]
    current: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    for step in [True, *churn]:
        if not step and len(names) > 1:
            names.remove(rng.choice(names))
        elif step:
            names.append(f"x{rng.randrange(10**9)}")
        subs = {m: frozenset(tids) for m in names}
        current = assign(subs, {m: a for m, a in current.items() if m in subs}, counts)
        p_total = sum(topics)
        sharing = (len(names) + p_total - 1) // p_total
        for t, n in counts.items():
            for p in range(n):
                assert 1 <= len(_holders(current, t, p)) <= sharing
        sizes = [_count(current[m]) for m in names]
        assert max(sizes) - min(sizes) <= 1, sizes
        assert sum(sizes) == sharing * p_total
