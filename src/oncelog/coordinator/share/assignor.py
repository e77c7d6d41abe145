"""The share-group assignor (KIP-932's ``simple``): which partitions each member of a share group
is assigned. Pure.

The rules are those of Kafka 4.2's ``SimpleAssignor`` (group-coordinator,
``assignor/SimpleHomogeneousAssignmentBuilder.java`` and
``SimpleHeterogeneousAssignmentBuilder.java``); this is oncelog's own implementation of them:

* **Balance first.** With M members and P partitions, a partition is shared by
  ``ceil(M / P)`` members (``sharing``): one member per partition while members do not
  outnumber partitions, several only when they do. The ``sharing * P`` assignments are spread
  over the members so that any two members' counts differ by at most one.
* **Then stickiness.** A member keeps what it had as far as balance allows: only the partitions
  a member has too many of, or that are shared more than ``sharing``, move, and a partition
  with too few members goes to a member that has too few partitions. (Kafka hands the larger
  counts out by member order; here they go to the members that hold the most already, so
  fewer partitions move.)
* **Homogeneous or not.** When every member subscribes to the same topics, the partitions of
  all of them form one pool balanced together; otherwise each topic is balanced on its own
  among the members subscribed to it (Kafka's heterogeneous builder: a member on T1 and T2
  beside one member on T1 and one on T2 gets half of each).

Records of a partition shared by several members are divided among them when they are
acquired (partition.py): the assignment says who fetches where, acquisition who gets what.

Cost: O(P + M) per pool plus, at worst, O(P * M) to place partitions no member can take at
once; it runs when the group's members, subscriptions or subscribed topics change, never per
heartbeat.
"""

from __future__ import annotations

import uuid
from typing import Iterable, Mapping, Sequence

__all__ = ["Assignment", "assign", "balance"]

#: topic id -> partitions
Assignment = dict[uuid.UUID, frozenset[int]]
TP = tuple[uuid.UUID, int]


def assign(subscriptions: Mapping[str, frozenset[uuid.UUID]], current: Mapping[str, Assignment],
           partitions: Mapping[uuid.UUID, int | Sequence[int]]) -> dict[str, Assignment]:
    """The target assignment of every member of ``subscriptions`` (member id -> the ids of the
    topics it subscribes to that exist). ``current``: each member's assignment now (the
    stickiness); ``partitions``: topic id -> its partition count, or the partitions that may be
    assigned (Kafka's ``isPartitionAssignable``: those whose share state is initialized). A
    member with no partition gets an empty assignment."""
    ids = {t: range(v) if isinstance(v, int) else v for t, v in partitions.items()}
    if not subscriptions:
        return {}
    held: dict[str, set[TP]] = {m: {(t, p) for t, ps in current.get(m, {}).items() for p in ps}
                                for m in subscriptions}
    out: dict[str, set[TP]] = {m: set() for m in subscriptions}
    kinds = set(subscriptions.values())
    if len(kinds) == 1:
        topics = sorted(next(iter(kinds)), key=str)
        pools = [(sorted(subscriptions), [(t, p) for t in topics for p in ids.get(t, ())])]
    else:
        by_topic: dict[uuid.UUID, list[str]] = {}
        for m in sorted(subscriptions):
            for t in subscriptions[m]:
                by_topic.setdefault(t, []).append(m)
        pools = [(members, [(t, p) for p in ids.get(t, ())])
                 for t, members in sorted(by_topic.items(), key=lambda kv: str(kv[0]))]
    for members, pool in pools:
        for m, got in balance(members, pool, held).items():
            out[m] |= got
    return {m: _by_topic(tps) for m, tps in out.items()}


def balance(members: list[str], pool: list[TP], held: Mapping[str, Iterable[TP]]) -> dict[str, set[TP]]:
    """Spread the partitions of ``pool`` over ``members`` (module docstring), keeping what
    ``held`` gives each member where balance allows. Every partition gets at least one member
    when there is one; none gets more than ``ceil(len(members) / len(pool))``."""
    if not members or not pool:
        return {m: set() for m in members}
    valid = set(pool)
    mine: dict[str, list[TP]] = {m: sorted(set(held.get(m, ())) & valid) for m in members}
    n_members, n_parts = len(members), len(pool)
    sharing = -(-n_members // n_parts)
    total = sharing * n_parts
    # the larger counts go to the members holding most now (ties: member order)
    rank = {m: i for i, m in enumerate(members)}
    order = sorted(members, key=lambda m: (-len(mine[m]), rank[m]))
    desired = {m: _ceil_div(total * (i + 1), n_members) - _ceil_div(total * i, n_members) for i, m in enumerate(order)}
    holders: dict[TP, list[str]] = {tp: [] for tp in pool}
    for m in members:
        for tp in mine[m]:
            holders[tp].append(m)
    # a member over its count gives up its most shared partitions first
    for m in members:
        if len(mine[m]) > desired[m]:
            mine[m].sort(key=lambda tp: (len(holders[tp]), tp))
            while len(mine[m]) > desired[m]:
                holders[mine[m].pop()].remove(m)
    # a partition shared by more than ``sharing`` members loses the last ones
    for tp in pool:
        while len(holders[tp]) > sharing:
            mine[holders[tp].pop()].remove(tp)
    sets = {m: set(mine[m]) for m in members}
    unfilled = [m for m in members if len(sets[m]) < desired[m]]
    turn = 0
    for tp in pool:
        need = sharing - len(holders[tp])
        while need > 0 and unfilled:
            for _ in range(len(unfilled)):
                turn %= len(unfilled)
                m = unfilled[turn]
                if tp not in sets[m]:
                    sets[m].add(tp)
                    holders[tp].append(m)
                    need -= 1
                    if len(sets[m]) >= desired[m]:
                        unfilled.pop(turn)
                    else:
                        turn += 1
                    break
                turn += 1
            else:
                break  # every member with room has this partition already: repaired below
        if not unfilled:
            break
    # Kafka tolerates the slight imbalance left when a partition wants another member and every
    # member with room holds it already; here such a member ``u`` takes a partition ``q`` from a
    # full member ``v`` without ``tp``, and ``v`` takes ``tp`` instead (one always exists: a full
    # member without ``tp`` holds at least as many partitions as ``u``, so not all of ``u``'s)
    for tp in pool:
        while len(holders[tp]) < sharing and unfilled:
            u = next((m for m in unfilled if tp in sets[m]), None)
            swap = None if u is None else next(
                ((v, q) for v in members if v not in holders[tp] for q in sorted(sets[v] - sets[u])), None)
            if u is None or swap is None:
                break
            v, q = swap
            sets[v].discard(q)
            holders[q].remove(v)
            sets[u].add(q)
            holders[q].append(u)
            sets[v].add(tp)
            holders[tp].append(v)
            if len(sets[u]) >= desired[u]:
                unfilled.remove(u)
    return sets


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _by_topic(tps: Iterable[TP]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}
