"""Who should lead which partition: a pure function of the brokers and the partitions.

No I/O, no clock, no randomness: ``assign`` takes the registered brokers, the live ones, the
partitions in placement order and their current leaders with epochs, and returns the changes
that make the leadership what it should be. ``leadership.rebalance`` reads its inputs from the
store and writes its answer back in one transaction; any broker may run it.

Theory of operation:

1. **Preferred leaders.** The partitions, in placement order (the store gives creation order),
   are dealt round-robin over the *registered* brokers sorted by node id: the i-th partition
   prefers ``registered[i % len(registered)]``. Dealing over the whole registered set, live or
   not, keeps a broker's preferred partitions its own while it is away, so they move back when it
   returns; dealing in creation order keeps every topic, and the whole cluster, balanced, and a
   new topic or partition never changes an older partition's preference. (Registering a new
   broker, or forgetting one, re-deals: that is when leaders are meant to spread anew.)
2. **Preferred and live wins.** Every partition whose preferred broker is live is led by it:
   such a partition that is already there never moves, and one led elsewhere moves back.
3. **Orphans** (preferred broker not live) keep their current leader while it is live and has
   room; the rest go, in placement order, to the live broker leading the fewest partitions
   (ties: lowest node id).

Invariants of the result, each a property test (tests/cluster/test_assignment.py): with at least
one live broker every partition has exactly one live leader and the live brokers' counts differ
by at most 1; with none, no partition has a leader; a partition led by its live preferred broker
never moves; every change bumps the epoch by exactly one (epochs only grow); the same inputs give
the same answer. Why room always exists: the dealing gives every registered broker ``q`` or
``q + 1`` preferred partitions (``q = P // R``); with ``L <= R`` live brokers the even shape is
``f = P // L >= q`` each, ``r = P % L`` of them one more, and when ``f == q`` the live brokers
preferring ``q + 1`` are at most ``P % R <= r``: step 2 never overfills the shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from oncelog.types import TopicPartition

__all__ = ["NO_LEADER", "Lead", "LeaderChange", "apply_changes", "assign", "preferred_leaders"]

#: the leader of a partition that has none (Kafka's -1 in Metadata)
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class Lead:
    """A partition's current leader and leader epoch (``NO_LEADER`` and -1 for a new one)."""

    leader: int = NO_LEADER
    epoch: int = -1


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """One partition's new leader (``NO_LEADER`` when no broker is live) under ``new_epoch``,
    which is always ``old_epoch + 1``."""

    tp: TopicPartition
    old_leader: int
    old_epoch: int
    new_leader: int
    new_epoch: int


def preferred_leaders(registered: Iterable[int], partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    """Each partition's preferred leader: round-robin in placement order over the registered
    brokers sorted by node id. Empty if no broker is registered. Raises ValueError on a
    partition listed twice (a bug in the caller)."""
    brokers = sorted(set(registered))
    if len(set(partitions)) != len(partitions):
        raise ValueError("a partition is listed twice")
    if not brokers:
        return {}
    return {tp: brokers[i % len(brokers)] for i, tp in enumerate(partitions)}


def assign(registered: Iterable[int], live: Iterable[int], partitions: Sequence[TopicPartition],
           current: Mapping[TopicPartition, Lead]) -> list[LeaderChange]:
    """The changes that make the leadership balanced (see the module docstring), in placement
    order. ``live`` brokers count as registered; ``current`` may omit partitions (no leader yet)
    and may hold partitions not in ``partitions`` (ignored). Raises ValueError on a partition
    listed twice."""
    live_set = set(live)
    pref = preferred_leaders(set(registered) | live_set, partitions)
    now = {tp: current.get(tp, Lead()) for tp in partitions}
    if not live_set:
        return [_change(tp, now[tp], NO_LEADER) for tp in partitions if now[tp].leader != NO_LEADER]

    target: dict[TopicPartition, int] = {}
    count = dict.fromkeys(live_set, 0)
    for tp in partitions:  # 2. preferred and live
        if pref[tp] in live_set:
            target[tp] = pref[tp]
            count[pref[tp]] += 1

    floor, extra = divmod(len(partitions), len(live_set))  # the even shape: `extra` brokers get floor + 1
    at_cap = sum(1 for c in count.values() if c == floor + 1)
    orphans = [tp for tp in partitions if tp not in target]
    for tp in orphans:  # 3a. orphans stay where they are while there is room
        b = now[tp].leader
        if b in live_set and (count[b] < floor or (count[b] == floor and at_cap < extra)):
            target[tp] = b
            count[b] += 1
            at_cap += count[b] == floor + 1
    for tp in orphans:  # 3b. the rest go to the least loaded
        if tp not in target:
            b = min(live_set, key=lambda n: (count[n], n))
            target[tp] = b
            count[b] += 1
    return [_change(tp, now[tp], target[tp]) for tp in partitions if target[tp] != now[tp].leader]


def _change(tp: TopicPartition, lead: Lead, new_leader: int) -> LeaderChange:
    return LeaderChange(tp, lead.leader, lead.epoch, new_leader, lead.epoch + 1)


def apply_changes(current: Mapping[TopicPartition, Lead], changes: Iterable[LeaderChange]) -> dict[TopicPartition, Lead]:
    """``current`` with ``changes`` applied (a new mapping): what the store holds afterwards."""
    out = dict(current)
    for c in changes:
        out[c.tp] = Lead(c.new_leader, c.new_epoch)
    return out
