"""Leader assignment (cluster/assignment.py, issue 15), the pure core: Hypothesis over brokers,
live subsets, partitions and current leaders. No database."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.cluster.assignment import NO_LEADER, Lead, apply_changes, assign, preferred_leaders
from oncelog.types import TopicPartition as TP


@st.composite
def clusters(draw):
    registered = draw(st.sets(st.integers(0, 20), max_size=7))
    live = draw(st.sets(st.sampled_from(sorted(registered)), max_size=len(registered))) if registered else set()
    topics = draw(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(1, 13)), max_size=5,
                           unique_by=lambda t: t[0]))
    partitions = [TP(t, p) for t, n in topics for p in range(n)]
    leaders = sorted(registered | {NO_LEADER, 99})  # 99: a broker nobody knows any more
    current = {tp: Lead(draw(st.sampled_from(leaders)), draw(st.integers(-1, 50))) for tp in partitions
               if draw(st.booleans())}
    return registered, live, partitions, current


def _after(registered, live, partitions, current):
    changes = assign(registered, live, partitions, current)
    return changes, apply_changes({tp: current.get(tp, Lead()) for tp in partitions}, changes)


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_every_partition_has_one_live_leader_and_the_counts_are_even(c) -> None:
    registered, live, partitions, current = c
    _, after = _after(*c)
    if not live:
        assert all(lead.leader == NO_LEADER for lead in after.values())
        return
    assert all(after[tp].leader in live for tp in partitions)
    counts = Counter(after[tp].leader for tp in partitions)
    per_broker = [counts.get(b, 0) for b in live]
    assert max(per_broker) - min(per_broker) <= 1


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_a_partition_led_by_its_live_preferred_broker_never_moves(c) -> None:
    registered, live, partitions, current = c
    changes, _ = _after(*c)
    pref = preferred_leaders(registered | live, partitions)
    moved = {ch.tp for ch in changes}
    for tp, lead in current.items():
        if lead.leader in live and pref.get(tp) == lead.leader:
            assert tp not in moved


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_epochs_grow_by_one_per_change_and_only_changed_partitions_are_listed(c) -> None:
    registered, live, partitions, current = c
    changes, _ = _after(*c)
    assert len({ch.tp for ch in changes}) == len(changes)
    for ch in changes:
        old = current.get(ch.tp, Lead())
        assert (ch.old_leader, ch.old_epoch) == (old.leader, old.epoch)
        assert ch.new_epoch == old.epoch + 1
        assert ch.new_leader != old.leader


@settings(max_examples=200, deadline=None)
@given(clusters(), st.randoms(use_true_random=False))
def test_the_answer_is_deterministic_and_stable(c, rnd) -> None:
    registered, live, partitions, current = c
    changes, after = _after(*c)
    shuffled_current = dict(sorted(current.items(), key=lambda _: rnd.random()))
    shuffled_brokers = sorted(registered, key=lambda _: rnd.random())
    assert assign(shuffled_brokers, list(live), partitions, shuffled_current) == changes
    # Once applied, nothing more to do: a second rebalance is a no-op.
    assert assign(registered, live, partitions, after) == []


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_a_returning_broker_gets_its_preferred_partitions_back(c) -> None:
    registered, live, partitions, current = c
    _, after = _after(*c)
    for b in sorted(registered - live):
        changes = assign(registered, live | {b}, partitions, after)
        back = apply_changes(after, changes)
        pref = preferred_leaders(registered, partitions)
        # all of its preferred partitions, and maybe orphans of brokers still away
        assert {tp for tp in partitions if pref[tp] == b} <= {tp for tp in partitions if back[tp].leader == b}


def test_preferred_leaders_spread_every_topic_and_keep_old_topics_when_a_topic_is_added() -> None:
    brokers = [1, 2, 3]
    orders = [TP("orders", p) for p in range(12)]
    internal = [TP("__consumer_offsets", p) for p in range(50)] + [TP("__transaction_state", p) for p in range(50)]
    pref = preferred_leaders(brokers, internal + orders)
    for topic in ("orders", "__consumer_offsets", "__transaction_state"):
        per = Counter(b for tp, b in pref.items() if tp.topic == topic)
        assert max(per.values()) - min(per.values()) <= 1, (topic, per)
    more = preferred_leaders(brokers, internal + orders + [TP("new", p) for p in range(5)])
    assert all(more[tp] == pref[tp] for tp in pref)


def test_one_broker_away_and_back() -> None:
    parts = [TP("t", p) for p in range(12)]
    reg = {1, 2, 3}
    start = apply_changes({}, assign(reg, reg, parts, {}))
    assert Counter(lead.leader for lead in start.values()) == {1: 4, 2: 4, 3: 4}
    assert {lead.epoch for lead in start.values()} == {0}
    away = assign(reg, {1, 3}, parts, start)
    assert {ch.old_leader for ch in away} == {2} and len(away) == 4
    mid = apply_changes(start, away)
    assert Counter(lead.leader for lead in mid.values()) == {1: 6, 3: 6}
    back = assign(reg, reg, parts, mid)
    assert {ch.new_leader for ch in back} == {2} and len(back) == 4
    end = apply_changes(mid, back)
    assert {tp: lead.leader for tp, lead in end.items()} == {tp: lead.leader for tp, lead in start.items()}
    assert all(end[tp].epoch == 2 for tp in parts if start[tp].leader == 2)
    nobody = apply_changes(end, assign(reg, set(), parts, end))
    assert all(lead.leader == NO_LEADER for lead in nobody.values())
    assert assign(reg, set(), parts, nobody) == []


def test_a_partition_listed_twice_is_a_bug() -> None:
    import pytest

    with pytest.raises(ValueError):
        assign({1}, {1}, [TP("t", 0), TP("t", 0)], {})


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 9), min_size=1, max_size=6).flatmap(
    lambda reg: st.tuples(st.just(reg), st.lists(st.sets(st.sampled_from(sorted(reg))), min_size=1, max_size=8))),
    st.integers(0, 40))
def test_a_history_of_membership_changes_keeps_every_invariant(history, n_partitions) -> None:
    """Brokers come and go; after every rebalance the invariants hold, epochs grow by one per
    move, and a rebalance with every registered broker live restores the preferred leaders."""
    registered, lives = history
    parts = [TP("t", p) for p in range(n_partitions)]
    state: dict = {tp: Lead() for tp in parts}
    moves: Counter = Counter()
    for live in [*lives, registered]:
        changes = assign(registered, live, parts, state)
        moves.update(ch.tp for ch in changes)
        state = apply_changes(state, changes)
        assert all((state[tp].leader in live) if live else state[tp].leader == NO_LEADER for tp in parts)
        assert all(state[tp].epoch == moves[tp] - 1 for tp in parts)
        if live:
            per = Counter(state[tp].leader for tp in parts)
            assert max(per.get(b, 0) for b in live) - min(per.get(b, 0) for b in live) <= 1
    pref = preferred_leaders(registered, parts)
    assert all(state[tp].leader == pref[tp] for tp in parts)
