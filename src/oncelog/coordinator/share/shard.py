"""One broker's share groups (KIP-932, issue 30): the pure core of the share coordinator.

What it holds: the share groups whose members heartbeat here (``groups``: group.py), the share
sessions opened here (``sessions``), the share partitions this broker serves (``partitions``:
partition.py, keyed by (group, topic id, partition)), the groups' own configs (``configs``),
which members a group's coordinator elsewhere confirmed (cluster mode), the deadline heap of the
acquisition locks, and per share partition the members waiting for room under the lock limit.

What it decides, given the time (``now``, milliseconds) and what it reads of a topic partition
(``LogView``: offsets, batches, aborted transactions), never waiting on anything: a heartbeat's
answer, the records a ShareFetch acquires and which batches carry them, an acknowledgement, the
records a member that left held, the locks and sessions that came due, an administrator's reset.
It writes nothing: the shell (broker/coordinators/share_coordinator.py) makes the share
partitions it changed durable through its persister, under one lock, before it answers, and
wakes the parked fetches the core names (``on_available``). Where the state is durable (the
embedded broker's ``__share_group_state``, cluster mode's store) is the persister's business;
both replay ``__share_group_state`` records into ``replay``.

Turns (``group.share.partition.max.record.locks``): a share partition whose records are held up
to the lock limit makes the fetches that find no room wait in line, first come first served, so
that a member freeing room by acknowledging does not take it back at once while others wait. A
member whose fetch ends keeps its place for ``TURN_GRACE_MS``, until its next fetch comes.
"""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

from oncelog.coordinator.share import records as srec
from oncelog.coordinator.share.configs import BY_DURATION, GROUP_CONFIGS, by_duration_ms
from oncelog.coordinator.share.group import HeartbeatAnswer, Sessions, ShareGroups
from oncelog.coordinator.share.partition import AcquiredRange, LogBatch, SharePartition, Snapshot
from oncelog.protocol import records
from oncelog.protocol.errors import InvalidRecordState, NonEmptyGroup

__all__ = ["Aborted", "LogView", "PartKey", "ShareSettings", "ShareShard"]

PartKey = tuple[str, uuid.UUID, int]  # (group, topic id, partition)
#: (topic id, partition) -> acknowledgement batches (first offset, last offset, types)
Acks = list[tuple[int, int, tuple[int, ...]]]
#: how often idle share sessions are expired (ms)
SESSION_SWEEP_MS = 1000
#: how long a member whose ShareFetch ended keeps its place in a turn queue (ms; clients send
#: the next one at once)
TURN_GRACE_MS = 1000


class Aborted(Protocol):
    """An aborted transaction of the log (storage/txn_index.AbortedTxn)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...


class LogView(Protocol):
    """What the core reads of the topic partition under a share partition (the partition this
    broker leads)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def batches(self, start: int) -> Iterable[tuple[records.BatchHeader, bytes]]:
        """The batches from the one holding ``start`` on, lazily (read as far as iterated)."""
        ...

    def aborted(self, start: int, upper: int) -> Sequence[Aborted]:
        """The aborted transactions of ``[start, upper)``."""
        ...

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, ...] | None:
        """(offset, ...) of the first record at or after ``timestamp_ms``; None: none."""
        ...


@dataclass(frozen=True)
class ShareSettings:
    """The broker's share-group configs (group.share.*)."""

    lock_ms: int = 30_000
    delivery_limit: int = 5
    max_locks: int = 2000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    max_groups: int = 1000
    max_sessions: int = 2000


class ShareShard:
    """See the module docstring. ``on_available(key)``: records of that share partition may be
    available now (or it went away): its parked fetches look again."""

    def __init__(self, settings: ShareSettings, *, on_available: Callable[[PartKey], None] = lambda pk: None) -> None:
        self.settings = settings
        self.max_locks = settings.max_locks
        self.groups = ShareGroups(session_timeout_ms=settings.session_timeout_ms,
                                  heartbeat_interval_ms=settings.heartbeat_interval_ms,
                                  max_size=settings.max_size, max_groups=settings.max_groups)
        self.sessions = Sessions(max_sessions=settings.max_sessions, idle_ms=settings.session_timeout_ms)
        self.partitions: dict[PartKey, SharePartition] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self._on_available = on_available
        #: group -> the keys of its share partitions in ``partitions`` (kept by ``put``/``drop``)
        self._by_group: dict[str, set[PartKey]] = {}
        #: (lock deadline, share partition) per change that may have moved a partition's earliest
        #: lock; stale entries are skipped when they come due
        self._lock_heap: list[tuple[int, PartKey]] = []
        #: cluster mode: (group, member) -> when its coordinator last confirmed it (ms)
        self._confirmed: dict[tuple[str, str], int] = {}
        #: share partition -> members whose fetch waits for room under the lock limit, first come
        #: first served (module docstring). Each member maps to 0 while its fetch is parked, else
        #: to when it loses its place
        self._turns: dict[PartKey, dict[str, int]] = {}
        self._next_sweep = 0
        self._next_check = 0

    # -- the share partitions held ------------------------------------------------------------

    def replay(self, key: srec.Key, value: srec.Value | None) -> None:
        """Apply one ``__share_group_state`` record (a load, or a share partition read again)."""
        if isinstance(key, srec.ConfigKey):
            if value is None:
                self.configs.pop(key.group, None)
            else:
                self.configs[key.group] = dict(value)  # type: ignore[arg-type]
            return
        pk = (key.group, key.topic_id, key.partition)
        if value is None:
            self.drop(pk)
        else:
            assert isinstance(value, Snapshot)
            self.put(pk, SharePartition.restore(value, max_in_flight=self.max_locks))

    def put(self, pk: PartKey, sp: SharePartition) -> SharePartition:
        self.partitions[pk] = sp
        self._by_group.setdefault(pk[0], set()).add(pk)
        self._configure(pk)
        return sp

    def drop(self, pk: PartKey) -> None:
        """Forget share partition ``pk`` (its parked fetches look again)."""
        if self.partitions.pop(pk, None) is None:
            return
        keys = self._by_group.get(pk[0])
        if keys is not None:
            keys.discard(pk)
            if not keys:
                del self._by_group[pk[0]]
        self._on_available(pk)

    def group_partitions(self, group_id: str) -> list[PartKey]:
        """The keys of the group's share partitions held here."""
        return sorted(self._by_group.get(group_id, ()), key=str)

    def snapshots(self, keys: Iterable[PartKey]) -> list[tuple[srec.Key, srec.Value | None]]:
        """The records that make ``keys``' share partitions durable as they are now."""
        return [(srec.SnapshotKey(*k), self.partitions[k].snapshot()) for k in sorted(set(keys), key=str)
                if k in self.partitions]

    # -- configs ------------------------------------------------------------------------------

    def config(self, group_id: str, name: str) -> str:
        return self.configs.get(group_id, {}).get(name) or GROUP_CONFIGS[name]

    def set_configs(self, group_id: str, configs: dict[str, str] | None) -> None:
        """The group's own configs become ``configs`` (None or empty: none), applied to its
        share partitions held here."""
        if configs:
            self.configs[group_id] = dict(configs)
        else:
            self.configs.pop(group_id, None)
        for pk in self.group_partitions(group_id):
            self._configure(pk)

    def _configure(self, pk: PartKey) -> None:
        sp = self.partitions[pk]
        lock = self.config(pk[0], "share.record.lock.duration.ms")
        limit = self.config(pk[0], "share.delivery.count.limit")
        sp.lock_ms = int(lock) if lock else self.settings.lock_ms
        sp.delivery_limit = int(limit) if limit else self.settings.delivery_limit
        sp.renew_enabled = self.config(pk[0], "share.renew.acknowledge.enable").lower() == "true"

    # -- membership -----------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: tuple[str, ...] | None, resolve: Callable[[str], tuple[uuid.UUID, int] | None],
                  now: int, *, client_id: str, client_host: str) -> HeartbeatAnswer:
        """One ShareGroupHeartbeat (group.py). ``resolve(topic)``: (topic id, partitions) or
        None. Kafka's coordinator initializes the share state of newly subscribed partitions
        between two heartbeats and assigns them only then; here a share partition's state is
        initialized at its first fetch, and the partitions become assignable after the heartbeat
        that first subscribed them: members of a new group get their first partitions at their
        second heartbeat, balanced among all who joined meanwhile."""
        answer = self.groups.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed, resolve, now,
                                       client_id=client_id, client_host=client_host, initialized=self._initialized)
        for topic_id, partitions in answer.uninitialized.items():
            self.groups.mark_initialized(group_id, topic_id, partitions)
        return answer

    def _initialized(self, group_id: str) -> dict[uuid.UUID, frozenset[int]]:
        """The group's share partitions whose state is initialized here (embedded: durable;
        cluster mode: those this broker leads and has read)."""
        out: dict[uuid.UUID, set[int]] = {}
        for pk in self._by_group.get(group_id, ()):
            if self.partitions[pk].initialized:
                out.setdefault(pk[1], set()).add(pk[2])
        return {tid: frozenset(ps) for tid, ps in out.items()}

    def members_of(self, group_id: str) -> set[str]:
        """The members of the group here (empty: none, or not coordinated here)."""
        group = self.groups.groups.get(group_id)
        return set(group.members) if group is not None else set()

    def is_member(self, group_id: str, member_id: str, now: int) -> bool:
        """A member here, or one the group's coordinator confirmed within a session timeout."""
        if self.groups.is_member(group_id, member_id):
            return True
        seen = self._confirmed.get((group_id, member_id))
        return seen is not None and seen + self.groups.session_timeout_ms > now

    def confirm(self, group_id: str, member_id: str, now: int) -> None:
        """The group's coordinator has ``member_id`` now."""
        self._confirmed[(group_id, member_id)] = now

    def member_gone(self, group_id: str, member_id: str, *, drop_session: bool = True) -> None:
        """The member left, timed out or lost its session: its session closes (unless
        ``drop_session`` is false: the caller closed it), it waits in no line. Its records go
        back with ``release_member``."""
        if drop_session:
            self.sessions.drop_member(group_id, member_id)
        self._confirmed.pop((group_id, member_id), None)
        for pk in self.group_partitions(group_id):
            self._drop_turn(pk, member_id)

    def release_member(self, group_id: str, member_id: str, now: int) -> list[PartKey]:
        """The member's acquired records become available; returns the share partitions changed."""
        return [pk for pk in self.group_partitions(group_id)
                if (sp := self.partitions[pk]).holds(member_id) and sp.release_member(member_id, now)]

    def sessions_to_check(self) -> dict[str, list[str]]:
        """Group -> members with a share session here that are not members here (their
        coordinator is asked whether it still has them)."""
        by_group: dict[str, list[str]] = {}
        for group_id, member_id in list(self.sessions.sessions):
            if not self.groups.is_member(group_id, member_id):
                by_group.setdefault(group_id, []).append(member_id)
        return by_group

    # -- acknowledge and acquire ----------------------------------------------------------------

    def acknowledge(self, pk: PartKey, member_id: str, batches: Acks, now: int) -> None:
        """Apply the member's acknowledgement batches to share partition ``pk`` (all or nothing).
        Raises InvalidRecordState, ValueError (a malformed batch)."""
        sp = self.partitions.get(pk)
        if sp is None:
            raise InvalidRecordState(f"no records of {pk[1]}-{pk[2]} are in flight for group {pk[0]}")
        sp.acknowledge(member_id, batches, now)
        self._watch_locks(pk, sp)  # a renewal moved a deadline

    def open_partition(self, pk: PartKey, log: LogView, now: int) -> bool:
        """Share partition ``pk`` ready to acquire from: created and given its start offset
        (``share.auto.offset.reset``) if it has none, trimmed to the log start. Returns whether
        it was not initialized before (its start offset must be durable before anything is
        acquired)."""
        sp = self.partitions.get(pk)
        fresh = sp is None or not sp.initialized
        if sp is None:
            sp = self.put(pk, SharePartition(max_in_flight=self.max_locks))
        if not sp.initialized:
            sp.initialize(self._reset_offset(pk[0], log, now))
        sp.trim_to(log.log_start_offset)
        return fresh

    def _reset_offset(self, group_id: str, log: LogView, now: int) -> int:
        """Where a share partition starts (``share.auto.offset.reset``): the log start, the high
        watermark, or (by_duration) the first record at or after now minus the duration."""
        reset = self.config(group_id, "share.auto.offset.reset")
        if reset == "earliest":
            return int(log.log_start_offset)
        if reset.startswith(BY_DURATION):
            found = log.offset_for_timestamp(now - by_duration_ms(reset))
            return int(log.high_watermark) if found is None else min(int(found[0]), int(log.high_watermark))
        return int(log.high_watermark)

    def acquire(self, pk: PartKey, member_id: str, log: LogView, records_left: int, budget: int, now: int, *,
                record_limit: bool = False) -> tuple[list[AcquiredRange], list[bytes]]:
        """Acquire for ``member_id`` up to ``records_left`` records of share partition ``pk``
        (opened: ``open_partition``), reading at most ``budget`` bytes of batches (at least one)
        and the log only as far as those records need; returns the ranges acquired and the
        batches that carry them. A member whose turn it is not, or that finds the partition
        held up to the lock limit, waits in line (nothing acquired)."""
        sp = self.partitions[pk]
        first = self._first_turn(pk, now)
        if sp.acquired_count() >= self.max_locks or (first is not None and first != member_id):
            self._wait_turn(pk, member_id)
            return [], []
        start = sp.next_fetch_offset()
        read_committed = self.config(pk[0], "share.isolation.level") == "read_committed"
        upper = log.last_stable_offset if read_committed else log.high_watermark
        if start >= upper:
            return [], []
        batches: list[tuple[records.BatchHeader, bytes]] = []
        size = 0
        new = 0  # offsets from the SPEO on read so far: what ``acquire`` takes as new records
        limit = sp.spso + sp.max_in_flight
        for h, data in log.batches(start):
            if h.base_offset >= upper or h.base_offset >= limit or (batches and size + len(data) > budget):
                break
            if new >= records_left and h.last_offset >= sp.speo:
                break  # ``acquire`` stops before this batch: the read is bounded by max_records
            batches.append((h, bytes(data)))
            size += len(data)
            if not h.is_control and h.last_offset >= sp.speo:
                new += h.last_offset + 1 - max(h.base_offset, sp.speo)
        aborted = log.aborted(start, upper) if read_committed else []
        view = [LogBatch(h.base_offset, h.last_offset, h.is_control or _is_aborted(h, aborted)) for h, _ in batches]
        ranges = sp.acquire(member_id, view, records_left, now, record_limit=record_limit)
        if not ranges:
            if sp.acquired_count():  # records there, but held up to the lock limit: wait for room
                self._wait_turn(pk, member_id)
            return [], []
        if first == member_id:
            self._drop_turn(pk, member_id)
        self._watch_locks(pk, sp)
        data = [d for h, d in batches
                if any(r.first_offset <= h.last_offset and h.base_offset <= r.last_offset for r in ranges)]
        return ranges, data

    def _wait_turn(self, pk: PartKey, member_id: str) -> None:
        """The member's fetch waits for its turn: queued last, or back at the place it kept."""
        self._turns.setdefault(pk, {})[member_id] = 0

    def _first_turn(self, pk: PartKey, now: int) -> str | None:
        """The member whose turn it is (None: nobody waits); those whose place ran out go."""
        turns = self._turns.get(pk)
        while turns:
            member_id, until = next(iter(turns.items()))
            if until == 0 or until > now:
                return member_id
            del turns[member_id]
        self._turns.pop(pk, None)
        return None

    def _drop_turn(self, pk: PartKey, member_id: str) -> None:
        turns = self._turns.get(pk)
        if turns is not None:
            turns.pop(member_id, None)
            if not turns:
                del self._turns[pk]

    def fetch_ended(self, group_id: str, member_id: str, wanted: Iterable[tuple[uuid.UUID, int]], now: int) -> None:
        """A fetch that ends keeps its member's place for TURN_GRACE_MS: its next fetch takes it
        back; once the place runs out the next in line goes (at its next look)."""
        until = now + TURN_GRACE_MS
        for tid, p in wanted:
            turns = self._turns.get((group_id, tid, p))
            if turns and member_id in turns:
                turns[member_id] = until

    # -- timers -----------------------------------------------------------------------------------

    def _watch_locks(self, pk: PartKey, sp: SharePartition) -> None:
        deadline = sp.next_deadline()
        if deadline is None:
            return
        heapq.heappush(self._lock_heap, (deadline, pk))
        if len(self._lock_heap) > 4 * len(self.partitions) + 1024:  # mostly stale: one entry per partition
            self._lock_heap = [(d, k) for k, p in self.partitions.items() if (d := p.next_deadline()) is not None]
            heapq.heapify(self._lock_heap)

    def expire_locks(self, now: int) -> list[PartKey]:
        """The acquisition locks that came due (what the heap holds up to ``now``) released;
        returns the share partitions changed."""
        due: set[PartKey] = set()
        while self._lock_heap and self._lock_heap[0][0] <= now:
            due.add(heapq.heappop(self._lock_heap)[1])
        changed = []
        for pk in sorted(due, key=str):
            sp = self.partitions.get(pk)
            if sp is None:
                continue
            if sp.expire_locks(now):
                changed.append(pk)
            self._watch_locks(pk, sp)
        return changed

    def locks_due(self, now: int) -> bool:
        return bool(self._lock_heap) and self._lock_heap[0][0] <= now

    def sweep_due(self, now: int) -> bool:
        """Whether it is time (once a second) to expire idle sessions and stale confirmations;
        if so the next sweep is a second away."""
        if now < self._next_sweep:
            return False
        self._next_sweep = now + SESSION_SWEEP_MS
        return True

    def expire_idle(self, now: int) -> list[tuple[str, str]]:
        """The share sessions unused for a session timeout closed (their (group, member)), and
        the confirmations older than a session timeout forgotten."""
        gone = self.sessions.expire_idle(now)
        for key in [k for k, seen in self._confirmed.items() if seen + self.groups.session_timeout_ms <= now]:
            del self._confirmed[key]
        return gone

    def check_due(self, now: int) -> bool:
        """Whether it is time (every third of a session timeout, at least a second apart) to
        check the sessions of members kept elsewhere; if so the next check is then."""
        if now < self._next_check:
            return False
        self._next_check = now + max(self.groups.session_timeout_ms // 3, 1000)
        return True

    # -- administration ---------------------------------------------------------------------------

    def known(self, group_id: str) -> bool:
        """A share group this broker has: members, configs or share-partition state."""
        return group_id in self.groups.groups or group_id in self.configs or group_id in self._by_group

    def empty_groups(self) -> list[str]:
        """The groups without members here whose durable state (share partitions, configs) is."""
        return [gid for gid in sorted({*self._by_group, *self.configs}) if gid not in self.groups.groups]

    def start_offsets(self, group_id: str) -> dict[tuple[uuid.UUID, int], SharePartition]:
        """(topic id, partition) -> the group's share partition, for those initialized."""
        return {(pk[1], pk[2]): sp for pk in self.group_partitions(group_id) if (sp := self.partitions[pk]).initialized}

    def check_empty(self, group_id: str) -> None:
        """Raises NonEmptyGroup while the group has members (this broker must coordinate the
        group: it is where its members heartbeat, in cluster mode too; the caller checked)."""
        group = self.groups.groups.get(group_id)
        if group is not None and group.members:
            raise NonEmptyGroup(f"share group {group_id} has {len(group.members)} member(s): stop them first")

    def reset(self, group_id: str, offsets: dict[tuple[uuid.UUID, int], int]) -> list[PartKey]:
        """AlterShareGroupOffsets here: each partition's share-partition start offset becomes the
        one given, nothing in flight; returns the share partitions changed."""
        for (tid, p), offset in offsets.items():
            pk = (group_id, tid, p)
            sp = self.partitions.get(pk)
            if sp is None:
                sp = self.put(pk, SharePartition(max_in_flight=self.max_locks))
            sp.reset_to(offset)
        return [(group_id, tid, p) for tid, p in offsets]

    def forget_group(self, group_id: str) -> None:
        """The group is gone (DeleteGroups): its members' record, its configs."""
        self.configs.pop(group_id, None)
        self.groups.groups.pop(group_id, None)


def reset_state(raw: bytes | None, key: srec.SnapshotKey, offset: int, max_locks: int) -> bytes:
    """A share partition's stored state (``raw``, None: none) started over at ``offset`` (its
    state epoch goes on), encoded."""
    snap = None if raw is None else srec.decode_value(key, raw)
    sp = (SharePartition.restore(snap, max_in_flight=max_locks) if isinstance(snap, Snapshot)
          else SharePartition(max_in_flight=max_locks))
    sp.reset_to(offset)
    return srec.encode_value(sp.snapshot())


def restored(raw: bytes, key: srec.SnapshotKey, max_locks: int) -> SharePartition:
    """A share partition as stored (its durable part: nothing acquired)."""
    snap = srec.decode_value(key, raw)
    assert isinstance(snap, Snapshot)
    return SharePartition.restore(snap, max_in_flight=max_locks)


def _is_aborted(h: records.BatchHeader, aborted: Sequence[Aborted]) -> bool:
    if not h.is_transactional:
        return False
    return any(a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset for a in aborted)
