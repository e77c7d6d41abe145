"""The server-side assignors of consumer groups (KIP-848, ``group.consumer.assignors``):
``uniform`` (sticky, balanced) and ``range``, as Kafka's; pure functions of the members, the
topics, the previous target and what each member subscribes to.

Their work is bounded by what they are given, never by a product of it: ``range`` is O(the
subscriptions + the partitions) (a topic with fewer partitions than subscribers visits only
those that get one), ``uniform`` O(P + M) when every member subscribes to the same topics and
O(subscriptions + passes x P log M) otherwise (a heap of the eligible members per topic). Before,
range matched every topic against every member's subscription list (topics^2 x members: 0.9 s
a join for 300 members of 2,000 names) and uniform scanned every eligible member per partition.

A caller that resolved the subscriptions (the group: subscriptions.py) passes them, and may pass
their inverse (``by_topic``: topic name -> the sorted ids of its subscribers, ``subscribers``),
which the group keeps up to date as members join; without them each member's names and regex
are matched against ``topics`` here.

Pure and synchronous: no I/O.
"""

from __future__ import annotations

import heapq
import uuid
from typing import Any, Callable, Collection, Mapping, Protocol

from oncelog.coordinator.group.subscriptions import compile_regex

__all__ = ["ASSIGNORS", "Assignment", "Subscriptions", "Topics", "assign_range", "assign_uniform", "subscribers"]

#: partitions by topic id
Assignment = dict[uuid.UUID, frozenset[int]]
#: the broker's topics as the assignor sees them: name -> (topic id, partition count)
Topics = Mapping[str, tuple[uuid.UUID, int]]

#: member id -> the topic names (of the assignor's ``topics``) it subscribes to
Subscriptions = Mapping[str, frozenset[str]]


class ConsumerMember(Protocol):
    """What an assignor reads of a member (consumer_group.ConsumerMember has it)."""

    @property
    def member_id(self) -> str: ...

    @property
    def subscribed_names(self) -> Collection[str]: ...

    @property
    def subscribed_regex(self) -> str | None: ...


def _subscribed(member: ConsumerMember, topics: Topics) -> frozenset[str]:
    """The topics of ``topics`` a member subscribes to, matched from scratch (an assignor called
    on its own; the group passes what it resolved)."""
    names = set(n for n in member.subscribed_names if n in topics)
    if member.subscribed_regex is not None:
        rx = compile_regex(member.subscribed_regex)
        names.update(n for n in topics if not n.startswith("__") and rx.fullmatch(n))
    return frozenset(names)


def _subscriptions(members: list[ConsumerMember], topics: Topics, given: Subscriptions | None) -> Subscriptions:
    return given if given is not None else {m.member_id: _subscribed(m, topics) for m in members}


def subscribers(subscribed: Subscriptions) -> dict[str, list[str]]:
    """topic name -> the member ids subscribed to it, sorted: O(sum of the subscriptions)."""
    out: dict[str, list[str]] = {}
    for mid in sorted(subscribed):
        for name in subscribed[mid]:
            out.setdefault(name, []).append(mid)
    return out


def _frozen(out: Mapping[str, Mapping[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    return {mid: {t: frozenset(ps) for t, ps in a.items()} for mid, a in out.items()}


def assign_range(members: list[ConsumerMember], topics: Topics, previous: Mapping[str, Assignment],
                 subscribed: Subscriptions | None = None,
                 by_topic: Mapping[str, list[str]] | None = None) -> dict[str, Assignment]:
    """``range``: per topic, the subscribed members (by member id) get contiguous ranges of its
    partitions, the first ones one more when they do not divide evenly. O(subscriptions +
    partitions): a topic with fewer partitions than subscribers visits only those that get one."""
    subscribed = _subscriptions(members, topics, subscribed)
    out: dict[str, dict[uuid.UUID, set[int]]] = {mid: {} for mid in subscribed}
    for name, who in (by_topic if by_topic is not None else subscribers(subscribed)).items():
        if not who:
            continue
        tid, count = topics[name]
        per, extra = divmod(count, len(who))
        start = 0
        for i in range(len(who) if per else extra):
            n = per + (1 if i < extra else 0)
            out[who[i]].setdefault(tid, set()).update(range(start, start + n))
            start += n
    return _frozen(out)


def assign_uniform(members: list[ConsumerMember], topics: Topics, previous: Mapping[str, Assignment],
                   subscribed: Subscriptions | None = None,
                   by_topic: Mapping[str, list[str]] | None = None) -> dict[str, Assignment]:
    """``uniform``: every member gets as many partitions as it can (counts differ by at most one
    among members that could take each other's partitions), keeping each member's previous
    target where balance allows (sticky), so few partitions move when members come and go."""
    subscribed = _subscriptions(members, topics, subscribed)
    ids = sorted(subscribed)
    if not ids:
        return {}
    by_topic = {n: who for n, who in (by_topic if by_topic is not None else subscribers(subscribed)).items() if who}
    names = sorted(by_topic)
    if all(len(who) == len(ids) for who in by_topic.values()):  # every member subscribes to every topic
        return _uniform_homogeneous(ids, [(topics[n][0], p) for n in names for p in range(topics[n][1])], previous)
    partitions = [(name, topics[name][0], p) for name in names for p in range(topics[name][1])]
    quota = -(-len(partitions) // len(ids))  # ceil: nobody keeps more than this
    count = {mid: 0 for mid in ids}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    held = {(tid, p): mid for mid, a in previous.items() if mid in subscribed for tid, ps in a.items() for p in ps}
    # 1. sticky: keep the previous target where still subscribed and within the quota
    for name, tid, p in partitions:
        mid = held.get((tid, p))
        if mid is not None and name in subscribed[mid] and count[mid] < quota:
            owner[(tid, p)] = mid
            count[mid] += 1
    # 2. the rest to the eligible member with the fewest (a heap per topic: O(P log M))
    for name in names:
        tid, n = topics[name]
        heap = [(count[mid], mid) for mid in by_topic[name]]
        heapq.heapify(heap)
        for p in range(n):
            if (tid, p) in owner:
                continue
            while heap[0][0] != count[heap[0][1]]:  # an entry older than its member's count
                heapq.heapreplace(heap, (count[heap[0][1]], heap[0][1]))
            c, mid = heap[0]
            owner[(tid, p)] = mid
            count[mid] = c + 1
            heapq.heapreplace(heap, (c + 1, mid))
    # 3. balance (members with different subscriptions): a partition moves from a member to an
    # eligible one with two or more fewer; a few passes, O(passes x P log M)
    for _ in range(4):
        moved = False
        for name in names:
            tid, n = topics[name]
            heap = [(count[mid], mid) for mid in by_topic[name]]
            heapq.heapify(heap)
            for p in range(n):
                while heap[0][0] != count[heap[0][1]]:
                    heapq.heapreplace(heap, (count[heap[0][1]], heap[0][1]))
                c, target = heap[0]
                mid = owner[(tid, p)]
                if c + 1 < count[mid]:
                    owner[(tid, p)] = target
                    count[mid] -= 1
                    count[target] = c + 1
                    heapq.heapreplace(heap, (c + 1, target))
                    heapq.heappush(heap, (count[mid], mid))
                    moved = True
        if not moved:
            break
    out: dict[str, dict[uuid.UUID, set[int]]] = {mid: {} for mid in ids}
    for (tid, p), mid in owner.items():
        out[mid].setdefault(tid, set()).add(p)
    return _frozen(out)


def _uniform_homogeneous(ids: list[str], partitions: list[tuple[uuid.UUID, int]],
                         previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """``uniform`` when every member subscribes to the same topics, in O(P + M): each member
    keeps its previous partitions up to its share (P // M, one more for the first P % M members
    to reach it), the rest go to the members below their share."""
    floor, extra = divmod(len(partitions), len(ids))
    wanted = set(partitions)
    owner: dict[tuple[uuid.UUID, int], str] = {}
    count = dict.fromkeys(ids, 0)
    bigger = extra  # members that may still get floor + 1
    for mid in sorted(m for m, a in previous.items() if a and m in count):  # (more members than partitions: few)
        for tid, ps in sorted(previous[mid].items(), key=lambda kv: str(kv[0])):
            for p in sorted(ps):
                key = (tid, p)
                if key not in wanted or key in owner:
                    continue
                if count[mid] < floor or (count[mid] == floor and bigger > 0):
                    if count[mid] == floor:
                        bigger -= 1
                    owner[key] = mid
                    count[mid] += 1
    free = iter(k for k in partitions if k not in owner)
    left = len(partitions) - len(owner)
    for mid in ids:
        if not left:
            break  # every partition has its owner (the common case with more members than partitions)
        share = floor + 1 if count[mid] > floor else floor  # above floor: it took a bigger share
        if share == floor and bigger > 0:
            share, bigger = floor + 1, bigger - 1
        while count[mid] < share:
            owner[next(free)] = mid
            count[mid] += 1
            left -= 1
    out: dict[str, dict[uuid.UUID, set[int]]] = {mid: {} for mid in ids}
    for (tid, p), mid in owner.items():
        out[mid].setdefault(tid, set()).add(p)
    return _frozen(out)


Assignor = Callable[[Any, Topics, Mapping[str, Assignment], "Subscriptions | None", "Mapping[str, list[str]] | None"],
                    dict[str, Assignment]]
ASSIGNORS: dict[str, Assignor] = {
    "uniform": assign_uniform,
    "range": assign_range,
}
