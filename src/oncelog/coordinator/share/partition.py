"""One share partition (KIP-932): which records of a topic partition a share group has in
flight, and in which state. Pure: no I/O; the clock is passed in (``now``, ms).

Theory of operation (as Kafka's ``SharePartition``). The group consumes the partition from the
share-partition start offset (SPSO) on; records below it are done (acknowledged or archived).
Records in ``[spso, speo)`` are *in flight*: each has a state (``RecordState``), a delivery count
and, while acquired, the member holding it and the deadline of its acquisition lock. Records
from SPEO on have never been acquired; ``acquire`` takes them from the log batches the shell
read (``LogBatch``), after it re-acquired the AVAILABLE in-flight ones (redelivery). Every state
change is one row of ``TRANSITIONS`` (state, event) -> state; an event a state has no row for
raises ``InvalidRecordState`` (Kafka's INVALID_RECORD_STATE), except that a release or a lock
timeout of a record delivered ``delivery_limit`` times archives it (its row's ``limit`` state).
After every change the SPSO moves past the records at its head that are ACKNOWLEDGED or
ARCHIVED, and their entries are dropped, so memory is bounded by ``max_in_flight`` (Kafka's
``group.share.partition.max.record.locks``): ``acquire`` never takes a record at or past
``spso + max_in_flight``.

Indexes, so that no timer or fetch walks the records in flight: a heap of acquisition-lock
deadlines (``next_deadline``, ``expire_locks``), a heap of the offsets that became AVAILABLE
again (``next_fetch_offset``), and per member the offsets it holds (``release_member``). Heap
entries are checked against the record when they come up (a record acknowledged or
re-acquired since leaves a stale entry, skipped), and a heap mostly stale is rebuilt.

Lock renewal (RENEW, KIP-1222) keeps an ACQUIRED record's lock for another ``lock_ms``. Kafka
renews without a bound; here a record is granted at most ``delivery_limit`` lock durations by
acquisitions and renewals together (its delivery count plus its renewals): past that a RENEW is
INVALID_RECORD_STATE, the lock runs out, and the record goes back (or is archived at the
delivery limit), so a member renewing for ever cannot pin the in-flight window. A group may turn
renewal off (``renew_enabled``: Kafka's ``share.renew.acknowledge.enable``).

Durability: ``snapshot`` is what a restart must find (as Kafka's ShareSnapshot record): the
SPSO, the state epoch and the in-flight ranges that are not AVAILABLE with a delivery count of
0. An ACQUIRED record is written AVAILABLE (a lock does not outlive the broker, as in Kafka),
with its delivery count. ``restore`` builds the partition back from it.
"""

from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from oncelog.protocol.errors import InvalidRecordState

__all__ = [
    "AckType", "AcquiredRange", "Event", "InFlight", "LogBatch", "RecordState", "SharePartition", "Snapshot",
    "StateBatch", "TRANSITIONS",
]


class RecordState(enum.IntEnum):
    """Kafka's delivery states (their ids are those of the ShareSnapshot record)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge acknowledge types (KIP-932; RENEW: KIP-1222, v2)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class Event(enum.Enum):
    ACQUIRE = "acquire"
    ACCEPT = "accept"
    RELEASE = "release"
    REJECT = "reject"
    GAP = "gap"
    RENEW = "renew"
    LOCK_TIMEOUT = "lock timeout"
    ARCHIVE = "archive"  # never to be delivered: a control record, an aborted transaction's, an offset reset


A, Q, K, X = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED

#: (state, event) -> the next state. RELEASE and LOCK_TIMEOUT lead to AVAILABLE unless the record
#: has been delivered ``delivery_limit`` times: then to ARCHIVED (``_LIMITED``).
TRANSITIONS: dict[tuple[RecordState, Event], RecordState] = {
    (A, Event.ACQUIRE): Q,
    (A, Event.ARCHIVE): X,
    (Q, Event.ACCEPT): K,
    (Q, Event.RELEASE): A,
    (Q, Event.REJECT): X,
    (Q, Event.GAP): X,
    (Q, Event.RENEW): Q,
    (Q, Event.LOCK_TIMEOUT): A,
    (Q, Event.ARCHIVE): X,
    (K, Event.ARCHIVE): K,
    (X, Event.ARCHIVE): X,
}
_LIMITED = frozenset({(Q, Event.RELEASE), (Q, Event.LOCK_TIMEOUT)})
_ACK_EVENTS = {AckType.GAP: Event.GAP, AckType.ACCEPT: Event.ACCEPT, AckType.RELEASE: Event.RELEASE,
               AckType.REJECT: Event.REJECT, AckType.RENEW: Event.RENEW}


@dataclass(slots=True)
class InFlight:
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member_id: str | None = None  # who holds it (ACQUIRED only)
    deadline: int = 0  # when its acquisition lock expires (ACQUIRED only)
    renewals: int = 0  # locks renewed (RENEW), all deliveries together


class LogBatch(NamedTuple):
    """What ``acquire`` needs of one log batch: its offsets and whether its records may never be
    delivered (a control batch; read_committed: an aborted transaction's batch)."""

    first_offset: int
    last_offset: int
    skip: bool = False


class AcquiredRange(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class StateBatch(NamedTuple):
    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


class Snapshot(NamedTuple):
    """The durable part of a share partition (Kafka's ShareSnapshotValue, less its timestamps)."""

    start_offset: int
    state_epoch: int
    batches: tuple[StateBatch, ...]


@dataclass
class SharePartition:
    """See the module docstring. ``spso`` -1: not initialized yet (the shell sets it from
    ``share.auto.offset.reset`` at the first fetch)."""

    delivery_limit: int = 5
    lock_ms: int = 30_000
    max_in_flight: int = 2000
    spso: int = -1
    speo: int = -1
    state_epoch: int = 0
    records: dict[int, InFlight] = field(default_factory=dict)
    #: records ACQUIRED now (kept by ``_move`` and ``trim_to``: read without walking ``records``)
    acquired: int = 0
    #: records acknowledged (ACCEPT) and archived (REJECT, GAP, delivery limit, skipped) since this
    #: partition was built or loaded: counters for the metrics, not durable
    acknowledged_total: int = 0
    archived_total: int = 0
    #: a RENEW is accepted (Kafka's group config ``share.renew.acknowledge.enable``)
    renew_enabled: bool = True
    #: (deadline, offset) per lock granted (module docstring: the indexes)
    _locks: list[tuple[int, int]] = field(default_factory=list, repr=False)
    #: offsets that became AVAILABLE in flight
    _available: list[int] = field(default_factory=list, repr=False)
    #: member -> the offsets it holds ACQUIRED
    _held: dict[str, set[int]] = field(default_factory=dict, repr=False)

    # -- state ------------------------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return self.spso >= 0

    def initialize(self, offset: int) -> None:
        self.spso = self.speo = offset
        self.records.clear()
        self.acquired = 0
        self._locks, self._available, self._held = [], [], {}

    def state_of(self, offset: int) -> InFlight:
        """The record's state (a record from SPEO on is AVAILABLE, never delivered; one below the
        SPSO is reported ACKNOWLEDGED: it is done; an in-flight offset without an entry is not in
        the log, reported ARCHIVED)."""
        if offset < self.spso:
            return InFlight(RecordState.ACKNOWLEDGED)
        if offset >= self.speo:
            return InFlight()
        return self.records.get(offset) or InFlight(RecordState.ARCHIVED)

    def _move(self, offset: int, event: Event, now: int, member: str | None = None) -> None:
        rec = self.records[offset]
        nxt = TRANSITIONS.get((rec.state, event))
        if nxt is None:
            raise InvalidRecordState(f"record {offset} is {rec.state.name}: cannot {event.value} it")
        if (rec.state, event) in _LIMITED and rec.delivery_count >= self.delivery_limit:
            nxt = RecordState.ARCHIVED
        if event is Event.ACQUIRE:
            rec.delivery_count += 1
        elif event is Event.RENEW:
            rec.renewals += 1
        self.acquired += (nxt is RecordState.ACQUIRED) - (rec.state is RecordState.ACQUIRED)
        if nxt is not rec.state:
            if nxt is RecordState.ACKNOWLEDGED:
                self.acknowledged_total += 1
            elif nxt is RecordState.ARCHIVED:
                self.archived_total += 1
        if rec.state is RecordState.ACQUIRED and rec.member_id is not None:
            self._unhold(rec.member_id, offset)
        if nxt is RecordState.ACQUIRED:
            assert member is not None
            rec.member_id, rec.deadline = member, now + self.lock_ms
            self._held.setdefault(member, set()).add(offset)
            self._push_lock(rec.deadline, offset)
        else:
            rec.member_id, rec.deadline = None, 0
            if nxt is RecordState.AVAILABLE:
                self._push_available(offset)
        rec.state = nxt

    def _unhold(self, member: str, offset: int) -> None:
        held = self._held.get(member)
        if held is not None:
            held.discard(offset)
            if not held:
                del self._held[member]

    def _push_lock(self, deadline: int, offset: int) -> None:
        heapq.heappush(self._locks, (deadline, offset))
        if len(self._locks) > 2 * self.acquired + 1024:  # mostly stale: rebuild from the records held
            self._locks = [(self.records[o].deadline, o) for held in self._held.values() for o in held]
            heapq.heapify(self._locks)

    def _push_available(self, offset: int) -> None:
        heapq.heappush(self._available, offset)
        if len(self._available) > 2 * self.max_in_flight + 1024:
            self._rebuild_available()

    def _rebuild_available(self) -> None:
        self._available = [o for o, r in self.records.items() if r.state is RecordState.AVAILABLE]
        heapq.heapify(self._available)

    def _advance(self) -> None:
        """Move the SPSO past the done records at its head."""
        while self.spso < self.speo:
            rec = self.records.get(self.spso)  # None: an offset the log does not have (compaction)
            if rec is not None and rec.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            self.records.pop(self.spso, None)
            self.spso += 1

    # -- acquisition ------------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where the shell should start reading the log: the first AVAILABLE in-flight record,
        else SPEO (from the heap of AVAILABLE offsets: no walk of the records in flight)."""
        heap = self._available
        while heap:
            off = heap[0]
            rec = self.records.get(off)
            if self.spso <= off < self.speo and rec is not None and rec.state is RecordState.AVAILABLE:
                return off
            heapq.heappop(heap)
        return self.speo

    def acquire(self, member: str, batches: Iterable[LogBatch], max_records: int, now: int, *,
                record_limit: bool = False) -> list[AcquiredRange]:
        """Acquire for ``member`` up to ``max_records`` records among those of ``batches`` (the
        log read from ``next_fetch_offset``, ascending): AVAILABLE in-flight records, then new
        ones from SPEO on by whole batches (a batch started is taken whole, as Kafka's default
        batch-optimized mode: the answer may hold more than ``max_records``). Records of a
        ``skip`` batch are archived, never acquired. ``record_limit`` (ShareFetch v2's acquire
        mode 1): never more than ``max_records``, a batch split if need be. In-flight offsets the
        log skips (compacted away) are dropped. Returns the acquired ranges, ascending."""
        taken: list[tuple[int, int]] = []  # (offset, delivery count)
        count = 0
        limit = self.spso + self.max_in_flight
        cursor = self.next_fetch_offset()
        for b in batches:
            if b.last_offset < cursor:
                continue
            if b.last_offset >= self.speo and count >= max_records:
                break  # new records, and enough taken (before the SPEO may jump a gap below)
            for off in range(cursor, min(b.first_offset, self.speo)):  # not in the log any more
                rec = self.records.get(off)
                if rec is not None and rec.state is RecordState.AVAILABLE:
                    del self.records[off]
            if b.first_offset > self.speo:
                if b.first_offset >= limit:
                    break
                self.speo = b.first_offset  # offsets compacted away: nothing to deliver there
            cursor = b.last_offset + 1
            for off in range(max(b.first_offset, self.spso), b.last_offset + 1):
                if off < self.speo:
                    rec = self.records.get(off)
                    if rec is None or rec.state is not RecordState.AVAILABLE or count >= max_records:
                        continue
                else:
                    if off >= limit or (record_limit and count >= max_records):
                        break
                    self.records[off] = InFlight()
                    self.speo = off + 1
                if b.skip:
                    self._move(off, Event.ARCHIVE, now)
                    continue
                self._move(off, Event.ACQUIRE, now, member)
                taken.append((off, self.records[off].delivery_count))
                count += 1
            if self.speo >= limit:
                break
        self._advance()
        return _ranges(taken)

    # -- acknowledgement --------------------------------------------------------------------------

    def acknowledge(self, member: str, acks: Iterable[tuple[int, int, tuple[int, ...]]], now: int) -> None:
        """Apply ``member``'s acknowledgement batches ((first, last, types): one type for the whole
        range, or one per offset) all or nothing. Raises ``InvalidRecordState`` when a record is
        not ACQUIRED by ``member`` (a lock that expired, another member's record, a record
        acknowledged twice) and ``InvalidRequest``-like ``ValueError`` for a malformed batch."""
        plan: list[tuple[int, Event]] = []
        seen: set[int] = set()
        for first, last, types in acks:
            if last < first or (len(types) != 1 and len(types) != last - first + 1):
                raise ValueError(f"acknowledgement batch {first}..{last} with {len(types)} type(s)")
            if last - first + 1 > self.max_in_flight + max(self.speo - self.spso, 0):
                raise InvalidRecordState(f"acknowledgement batch {first}..{last} is wider than the records in flight")
            for i, off in enumerate(range(first, last + 1)):
                t = types[0] if len(types) == 1 else types[i]
                try:
                    event = _ACK_EVENTS[AckType(t)]
                except ValueError:
                    raise ValueError(f"unknown acknowledge type {t}") from None
                rec = self.records.get(off)
                if off in seen or rec is None or rec.state is not RecordState.ACQUIRED or rec.member_id != member:
                    state = self.state_of(off)
                    raise InvalidRecordState(
                        f"record {off} is {state.state.name}{'' if state.member_id in (None, member) else ' by another member'}"
                        f": member {member} cannot acknowledge it")
                if event is Event.RENEW:
                    self._check_renewal(off, rec)
                seen.add(off)
                plan.append((off, event))
        for off, event in plan:
            self._move(off, event, now, member)
        self._advance()

    def _check_renewal(self, offset: int, rec: InFlight) -> None:
        """Raises InvalidRecordState unless the lock of ``rec`` may be renewed (module docstring)."""
        if not self.renew_enabled:
            raise InvalidRecordState("Renewing acquisition locks is not enabled for the group "
                                     "(share.renew.acknowledge.enable=false).")
        granted = rec.delivery_count + rec.renewals
        if granted >= self.delivery_limit:
            raise InvalidRecordState(
                f"record {offset} has been granted {granted} acquisition locks ({rec.delivery_count} deliveries, "
                f"{rec.renewals} renewals), the delivery count limit {self.delivery_limit}: its lock is not "
                f"renewed again")

    def release_member(self, member: str, now: int) -> bool:
        """A member left (or its share session closed): its records go back (RELEASE). True when
        anything changed. Costs the records the member holds."""
        mine = sorted(self._held.get(member, ()))
        for off in mine:
            self._move(off, Event.RELEASE, now)
        self._advance()
        return bool(mine)

    def holds(self, member: str) -> bool:
        return member in self._held

    def expire_locks(self, now: int) -> bool:
        """Acquisition locks whose deadline passed: their records become AVAILABLE again (ARCHIVED
        at the delivery limit). True when anything changed. Costs the locks that came due."""
        changed = False
        while self._locks and self._locks[0][0] <= now:
            deadline, off = heapq.heappop(self._locks)
            rec = self.records.get(off)
            if rec is None or rec.state is not RecordState.ACQUIRED or rec.deadline != deadline:
                continue  # acknowledged, released or renewed since
            self._move(off, Event.LOCK_TIMEOUT, now)
            changed = True
        self._advance()
        return changed

    def next_deadline(self) -> int | None:
        """The earliest lock deadline (None: nothing acquired)."""
        heap = self._locks
        while heap:
            deadline, off = heap[0]
            rec = self.records.get(off)
            if rec is not None and rec.state is RecordState.ACQUIRED and rec.deadline == deadline:
                return deadline
            heapq.heappop(heap)
        return None

    def acquired_count(self) -> int:
        return self.acquired

    @property
    def in_flight(self) -> int:
        """Records between the SPSO and the SPEO (Kafka's in-flight window)."""
        return max(self.speo - self.spso, 0)

    def trim_to(self, log_start: int) -> None:
        """Records below the log start offset are gone (retention, DeleteRecords): the SPSO
        moves to it, dropping their in-flight entries."""
        if self.spso >= log_start:
            return
        for off in range(self.spso, min(log_start, self.speo)):
            rec = self.records.pop(off, None)
            if rec is not None and rec.state is RecordState.ACQUIRED:
                self.acquired -= 1
                if rec.member_id is not None:
                    self._unhold(rec.member_id, off)
        self.spso = log_start
        self.speo = max(self.speo, log_start)
        self._advance()

    def reset_to(self, offset: int) -> None:
        """AlterShareGroupOffsets: start over at ``offset`` (nothing may be acquired)."""
        self.state_epoch += 1
        self.initialize(offset)

    # -- durability --------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The durable part (module docstring): runs of equal (state, delivery count) as one
        state batch each."""
        out: list[StateBatch] = []
        A, Q = RecordState.AVAILABLE, RecordState.ACQUIRED
        run: tuple[RecordState, int] | None = None  # the open run's (state, delivery count)
        first = last = -1
        records = self.records
        for off in range(self.spso, self.speo):
            rec = records.get(off)
            key = None if rec is None else (A if rec.state is Q else rec.state, rec.delivery_count)
            if key is not None and key[0] is A and key[1] == 0:
                key = None
            if key == run and key is not None and last == off - 1:
                last = off
                continue
            if run is not None:
                out.append(StateBatch(first, last, run[0], run[1]))
            run, first, last = key, off, off
        if run is not None:
            out.append(StateBatch(first, last, run[0], run[1]))
        return Snapshot(self.spso, self.state_epoch, tuple(out))

    @classmethod
    def restore(cls, snap: Snapshot, *, delivery_limit: int = 5, lock_ms: int = 30_000,
                max_in_flight: int = 2000) -> "SharePartition":
        sp = cls(delivery_limit=delivery_limit, lock_ms=lock_ms, max_in_flight=max_in_flight,
                 spso=snap.start_offset, speo=snap.start_offset, state_epoch=snap.state_epoch)
        for b in snap.batches:
            state = RecordState.AVAILABLE if b.state is RecordState.ACQUIRED else RecordState(b.state)
            for off in range(max(b.first_offset, sp.spso), b.last_offset + 1):
                sp.records[off] = InFlight(state, b.delivery_count)
            sp.speo = max(sp.speo, b.last_offset + 1)
        for off in range(sp.spso, sp.speo):
            sp.records.setdefault(off, InFlight())
        sp._advance()
        sp._rebuild_available()
        return sp


def _ranges(taken: list[tuple[int, int]]) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    for off, count in taken:
        if out and out[-1].last_offset == off - 1 and out[-1].delivery_count == count:
            out[-1] = out[-1]._replace(last_offset=off)
        else:
            out.append(AcquiredRange(off, off, count))
    return out
