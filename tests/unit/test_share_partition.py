"""The pure share partition (KIP-932, issue 30): its transition table, acquisition locks,
delivery counts, the SPSO, snapshots; a Hypothesis state machine over members, acknowledgements
and a clock checks the invariants a share group promises (a record held by one member at a time,
an accepted record never delivered again, none delivered more than the delivery limit, snapshot
= state)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from oncelog.coordinator.share import records as srec
from oncelog.coordinator.share.partition import (
    TRANSITIONS,
    AckType,
    AcquiredRange,
    Event,
    LogBatch,
    RecordState,
    SharePartition,
    Snapshot,
    StateBatch,
)
from oncelog.protocol.errors import InvalidRecordState

A, Q, K, X = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
LOG = [LogBatch(0, 4), LogBatch(5, 5, True), LogBatch(6, 9)]


def _sp(**kw) -> SharePartition:  # type: ignore[no-untyped-def]
    sp = SharePartition(**kw)
    sp.initialize(0)
    return sp


def test_acquire_takes_whole_batches_and_archives_skipped_ones() -> None:
    sp = _sp()
    assert sp.acquire("a", LOG, 3, now=0) == [AcquiredRange(0, 4, 1)]  # a started batch is taken whole
    assert sp.acquire("b", LOG, 100, now=0) == [AcquiredRange(6, 9, 1)]  # 5 is a control record: archived
    assert sp.state_of(5).state is X and sp.state_of(3).state is Q and sp.state_of(3).member_id == "a"


def test_record_limit_mode_splits_a_batch() -> None:
    sp = _sp()
    assert sp.acquire("a", LOG, 3, now=0, record_limit=True) == [AcquiredRange(0, 2, 1)]
    assert sp.speo == 3  # the rest of the batch stays new: not skipped
    assert sp.acquire("b", LOG, 3, now=0, record_limit=True) == [AcquiredRange(3, 4, 1), AcquiredRange(6, 6, 1)]
    assert sp.state_of(5).state is X


def test_counters_follow_acquire_accept_reject_and_the_limit() -> None:
    sp = _sp(delivery_limit=2)
    sp.acquire("m", [LogBatch(0, 4)], 10, 0)
    assert (sp.acquired, sp.in_flight, sp.acknowledged_total, sp.archived_total) == (5, 5, 0, 0)
    sp.acknowledge("m", [(0, 1, (AckType.ACCEPT,)), (2, 2, (AckType.REJECT,)), (3, 4, (AckType.RELEASE,))], 0)
    assert (sp.acquired, sp.in_flight, sp.acknowledged_total, sp.archived_total) == (0, 2, 2, 1)
    sp.acquire("m", [LogBatch(0, 4)], 10, 0)
    sp.acknowledge("m", [(3, 4, (AckType.RELEASE,))], 0)  # the second delivery: the limit archives them
    assert (sp.acquired, sp.in_flight, sp.acknowledged_total, sp.archived_total) == (0, 0, 2, 3)


def test_accept_release_reject_and_the_spso() -> None:
    sp = _sp()
    sp.acquire("a", LOG, 100, now=0)
    sp.acknowledge("a", [(0, 1, (AckType.ACCEPT,)), (2, 4, (AckType.RELEASE, AckType.REJECT, AckType.ACCEPT))], now=1)
    assert sp.spso == 2  # 0, 1 accepted; 2 released is AVAILABLE again
    assert [sp.state_of(o).state for o in range(2, 6)] == [A, X, K, X]
    assert sp.acquire("b", LOG, 100, now=2) == [AcquiredRange(2, 2, 2)]  # redelivered, count 2


def test_a_record_another_member_holds_or_already_accepted_cannot_be_acknowledged() -> None:
    sp = _sp()
    sp.acquire("a", LOG, 100, now=0)
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("b", [(0, 0, (AckType.ACCEPT,))], now=1)
    sp.acknowledge("a", [(0, 0, (AckType.ACCEPT,))], now=1)
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("a", [(0, 0, (AckType.ACCEPT,))], now=1)
    with pytest.raises(InvalidRecordState):  # all or nothing: 1 stays acquired
        sp.acknowledge("a", [(1, 1, (AckType.ACCEPT,)), (40, 40, (AckType.ACCEPT,))], now=1)
    assert sp.state_of(1).state is Q
    with pytest.raises(ValueError):
        sp.acknowledge("a", [(1, 3, (AckType.ACCEPT, AckType.ACCEPT))], now=1)  # 2 types for 3 records
    with pytest.raises(ValueError):
        sp.acknowledge("a", [(1, 1, (9,))], now=1)


def test_lock_timeout_redelivers_and_the_delivery_limit_archives() -> None:
    sp = _sp(delivery_limit=2, lock_ms=100)
    sp.acquire("a", [LogBatch(0, 0)], 1, now=0)
    assert not sp.expire_locks(now=99)
    assert sp.expire_locks(now=100) and sp.state_of(0).state is A
    assert sp.acquire("b", [LogBatch(0, 0)], 1, now=100) == [AcquiredRange(0, 0, 2)]
    sp.acknowledge("b", [(0, 0, (AckType.RELEASE,))], now=101)  # delivered twice: the limit
    assert sp.spso == 1 and sp.state_of(0).state is K  # below the SPSO: done (it was archived)
    assert sp.acquire("a", [LogBatch(0, 0)], 1, now=102) == []


def test_renew_extends_the_lock() -> None:
    sp = _sp(lock_ms=100)
    sp.acquire("a", [LogBatch(0, 0)], 1, now=0)
    sp.acknowledge("a", [(0, 0, (AckType.RENEW,))], now=90)
    assert not sp.expire_locks(now=150) and sp.expire_locks(now=190)


def test_renewal_is_bounded_by_the_delivery_count_limit() -> None:
    """A record is granted at most ``delivery_limit`` locks by acquisitions and renewals together:
    a member renewing for ever cannot pin the in-flight window (before: renewed without end).
    Kafka's SharePartition (core/src/main/java/kafka/server/share/SharePartition.java) renews
    without a bound; its only switch is the group config share.renew.acknowledge.enable."""
    sp = _sp(lock_ms=100, delivery_limit=3)
    sp.acquire("a", [LogBatch(0, 1)], 10, now=0)  # delivery 1: one lock granted
    sp.acknowledge("a", [(0, 0, (AckType.RENEW,))], now=50)  # 2
    sp.acknowledge("a", [(0, 0, (AckType.RENEW,))], now=100)  # 3: the limit
    with pytest.raises(InvalidRecordState, match="3 acquisition locks"):
        sp.acknowledge("a", [(0, 1, (AckType.RENEW,))], now=150)  # all or nothing: 1 is not renewed either
    assert sp.state_of(1).deadline == 100
    assert sp.expire_locks(now=199) and sp.state_of(0).state is Q  # 1's first lock ran out; 0 is renewed
    assert sp.expire_locks(now=200)  # the last renewal's lock runs out
    assert sp.state_of(0).state is A and sp.state_of(0).delivery_count == 1
    assert sp.acquire("b", [LogBatch(0, 1)], 10, now=200) == [AcquiredRange(0, 1, 2)]  # another member gets them
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("b", [(0, 0, (AckType.RENEW,))], now=210)  # 2 deliveries + 2 renewals: no more
    sp.acknowledge("b", [(1, 1, (AckType.RENEW,))], now=210)  # its neighbour has a lock left


def test_renewal_can_be_turned_off() -> None:
    sp = _sp(lock_ms=100)
    sp.renew_enabled = False
    sp.acquire("a", [LogBatch(0, 0)], 1, now=0)
    with pytest.raises(InvalidRecordState, match="share.renew.acknowledge.enable"):
        sp.acknowledge("a", [(0, 0, (AckType.RENEW,))], now=10)


class _NoWalk(dict):  # type: ignore[type-arg]
    """The records of a share partition, refusing to be walked."""

    def _walk(self, *a: object) -> None:
        raise AssertionError("the records in flight were walked")

    __iter__ = items = values = keys = _walk  # type: ignore[assignment]


def test_timers_fetches_and_releases_never_walk_the_records_in_flight() -> None:
    """2,000 records in flight: the lock timer (``next_deadline``, ``expire_locks``), where a
    fetch starts (``next_fetch_offset``) and a member's release cost what is due or held, not
    the window (before: each walked every record, every 100 ms tick and every fetch)."""
    sp = _sp(lock_ms=1000, max_in_flight=2000)
    sp.acquire("a", [LogBatch(0, 999)], 1000, now=0)
    sp.acquire("b", [LogBatch(1000, 1999)], 1000, now=500)
    sp.acknowledge("b", [(1000, 1000, (AckType.RELEASE,))], now=600)
    sp.records = _NoWalk(sp.records)
    for _ in range(1000):
        assert sp.next_deadline() == 1000 and not sp.expire_locks(now=999)
        assert sp.next_fetch_offset() == 1000
    assert sp.expire_locks(now=1000)  # "a"'s 1,000 locks, popped from the heap
    assert sp.next_fetch_offset() == 0 and sp.next_deadline() == 1500
    assert sp.release_member("b", now=1001) and sp.next_deadline() is None


def test_release_member_and_in_flight_cap() -> None:
    sp = _sp(max_in_flight=3)
    assert sp.acquire("a", [LogBatch(0, 9)], 100, now=0) == [AcquiredRange(0, 2, 1)]  # never past spso + 3
    assert sp.acquire("b", [LogBatch(0, 9)], 100, now=0) == []
    assert sp.release_member("a", now=1)
    assert sp.acquire("b", [LogBatch(0, 9)], 100, now=1) == [AcquiredRange(0, 2, 2)]


def test_every_other_transition_is_refused() -> None:
    for state in RecordState:
        for event in Event:
            sp = _sp()
            sp.records[0] = sp.records.get(0) or type(sp.state_of(0))()
            sp.speo = 1
            sp.records[0].state = state
            sp.records[0].member_id = "a" if state is Q else None
            if (state, event) in TRANSITIONS:
                sp._move(0, event, 0, "a")
                assert sp.records[0].state in (TRANSITIONS[(state, event)], X)
            else:
                with pytest.raises(InvalidRecordState):
                    sp._move(0, event, 0, "a")


def test_log_gaps_are_skipped() -> None:
    sp = _sp()
    assert sp.acquire("a", [LogBatch(3, 4), LogBatch(8, 8)], 100, now=0) == [AcquiredRange(3, 4, 1), AcquiredRange(8, 8, 1)]
    sp.acknowledge("a", [(3, 4, (1,)), (8, 8, (1,))], now=0)
    assert sp.spso == 9 and not sp.records


def test_snapshot_round_trip_through_the_record_bytes() -> None:
    sp = _sp()
    sp.acquire("a", LOG, 100, now=0)
    sp.acknowledge("a", [(1, 1, (AckType.ACCEPT,)), (2, 2, (AckType.RELEASE,))], now=1)
    snap = sp.snapshot()
    assert snap.start_offset == 0
    key = srec.SnapshotKey("g", uuid.uuid4(), 3)
    assert srec.decode_key(srec.encode_key(key)) == key
    assert srec.decode_value(key, srec.encode_value(snap)) == snap
    back = SharePartition.restore(snap)
    # the acquired records come back AVAILABLE with their delivery count, as in Kafka
    assert [(back.state_of(o).state, back.state_of(o).delivery_count) for o in range(0, 10)] == [
        (A, 1), (K, 1), (A, 1), (A, 1), (A, 1), (X, 0), (A, 1), (A, 1), (A, 1), (A, 1)]
    cfg = srec.ConfigKey("g")
    assert srec.decode_value(cfg, srec.encode_value((("share.isolation.level", "read_committed"),))) == (
        ("share.isolation.level", "read_committed"),)


def test_a_snapshot_spanning_too_many_offsets_is_refused_before_any_load_iterates_it() -> None:
    key = srec.SnapshotKey("g", uuid.uuid4(), 0)
    huge = Snapshot(0, 0, (StateBatch(0, 2**62, RecordState.ARCHIVED, 1),))
    with pytest.raises(srec.RecordFormatError):
        srec.decode_value(key, srec.encode_value(huge))


@given(st.binary(max_size=64))
def test_garbage_records_raise_record_format_error_only(data: bytes) -> None:
    try:
        key = srec.decode_key(data)
        srec.decode_value(key, data)
    except srec.RecordFormatError:
        pass


class SharePartitionMachine(RuleBasedStateMachine):
    """Members acquire, acknowledge, time out and leave; the log grows; snapshots restore."""

    MEMBERS = ("a", "b", "c")
    LIMIT = 3

    def __init__(self) -> None:
        super().__init__()
        self.sp = _sp(delivery_limit=self.LIMIT, lock_ms=50, max_in_flight=20)
        self.now = 0
        self.end = 0  # log end offset
        self.batches: list[LogBatch] = []
        self.accepted: set[int] = set()
        self.deliveries: dict[int, int] = {}
        self.trimmed = False

    def _log(self) -> list[LogBatch]:
        start = self.sp.next_fetch_offset()
        return [b for b in self.batches if b.last_offset >= start]

    @rule(n=st.integers(1, 4), skip=st.booleans())
    def append(self, n: int, skip: bool) -> None:
        self.batches.append(LogBatch(self.end, self.end + n - 1, skip and n == 1))
        self.end += n

    @rule(member=st.sampled_from(MEMBERS), n=st.integers(1, 6), strict=st.booleans())
    def acquire(self, member: str, n: int, strict: bool) -> None:
        got = self.sp.acquire(member, self._log(), n, self.now, record_limit=strict)
        if strict:
            assert sum(r.last_offset - r.first_offset + 1 for r in got) <= n
        for r in got:
            for off in range(r.first_offset, r.last_offset + 1):
                assert off not in self.accepted, f"accepted record {off} delivered again"
                self.deliveries[off] = self.deliveries.get(off, 0) + 1
                assert self.deliveries[off] == r.delivery_count <= self.LIMIT

    @rule(member=st.sampled_from(MEMBERS), t=st.sampled_from([0, 1, 2, 3]), data=st.data())
    def acknowledge(self, member: str, t: int, data: st.DataObject) -> None:
        mine = sorted(o for o, r in self.sp.records.items() if r.state is Q and r.member_id == member)
        if not mine:
            return
        off = data.draw(st.sampled_from(mine))
        self.sp.acknowledge(member, [(off, off, (t,))], self.now)
        if t == AckType.ACCEPT:
            self.accepted.add(off)

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def renew(self, member: str, data: st.DataObject) -> None:
        mine = sorted(o for o, r in self.sp.records.items() if r.state is Q and r.member_id == member)
        if not mine:
            return
        off = data.draw(st.sampled_from(mine))
        rec = self.sp.records[off]
        if rec.delivery_count + rec.renewals >= self.LIMIT:
            with pytest.raises(InvalidRecordState):
                self.sp.acknowledge(member, [(off, off, (AckType.RENEW,))], self.now)
        else:
            self.sp.acknowledge(member, [(off, off, (AckType.RENEW,))], self.now)
            assert self.sp.records[off].deadline == self.now + 50

    @rule(member=st.sampled_from(MEMBERS), off=st.integers(0, 40))
    def foreign_acknowledge_is_refused(self, member: str, off: int) -> None:
        r = self.sp.records.get(off)
        if r is not None and r.state is Q and r.member_id == member:
            return
        with pytest.raises(InvalidRecordState):
            self.sp.acknowledge(member, [(off, off, (AckType.ACCEPT,))], self.now)

    @rule(ms=st.integers(1, 80))
    def tick(self, ms: int) -> None:
        self.now += ms
        self.sp.expire_locks(self.now)

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member: str) -> None:
        self.sp.release_member(member, self.now)

    @rule(n=st.integers(0, 3))
    def retention(self, n: int) -> None:
        """The log start moves (retention, DeleteRecords), perhaps past acquired records."""
        self.trimmed = self.trimmed or n > 0
        self.sp.trim_to(min(self.sp.spso + n, self.end))

    @precondition(lambda self: not any(r.state is Q for r in self.sp.records.values()))
    @rule()
    def restart(self) -> None:
        snap = self.sp.snapshot()
        self.sp = SharePartition.restore(srec.decode_value(srec.SnapshotKey("g", uuid.UUID(int=1), 0),  # type: ignore[arg-type]
                                                           srec.encode_value(snap)),
                                         delivery_limit=self.LIMIT, lock_ms=50, max_in_flight=20)

    @invariant()
    def counters(self) -> None:
        """The metrics' counters (read without walking the records) match the records."""
        assert self.sp.acquired == sum(1 for r in self.sp.records.values() if r.state is Q)
        assert self.sp.in_flight == self.sp.speo - self.sp.spso

    @invariant()
    def nothing_skipped(self) -> None:
        """Every offset of the log below the SPEO was delivered, or archived as a skip batch
        (or went with the log start)."""
        skipped = {o for b in self.batches if b.skip for o in range(b.first_offset, b.last_offset + 1)}
        trimmed = self.sp.spso if self.trimmed else 0
        for o in range(trimmed, self.sp.speo):
            assert o in self.deliveries or o in skipped, f"offset {o} below the SPEO never delivered"

    @invariant()
    def indexes(self) -> None:
        """The heaps and the per-member index agree with a walk of the records."""
        sp = self.sp
        walk = next((o for o in range(sp.spso, sp.speo) if o in sp.records and sp.records[o].state is A), sp.speo)
        assert sp.next_fetch_offset() == walk
        deadlines = [r.deadline for r in sp.records.values() if r.state is Q]
        assert sp.next_deadline() == (min(deadlines) if deadlines else None)
        for m in self.MEMBERS:
            held = {o for o, r in sp.records.items() if r.state is Q and r.member_id == m}
            assert sp.holds(m) == bool(held) and sp._held.get(m, set()) == held

    @invariant()
    def consistent(self) -> None:
        sp = self.sp
        assert sp.spso <= sp.speo
        assert all(sp.spso <= o < sp.speo for o in sp.records)
        assert sp.speo - sp.spso <= 20 + 4  # the in-flight cap (a whole batch may straddle it)
        for o, r in sp.records.items():
            assert r.delivery_count <= self.LIMIT
            assert (r.state is Q) == (r.member_id is not None)
            if o in self.accepted:
                assert r.state is K
        head = sp.records.get(sp.spso)
        assert sp.spso == sp.speo or head is None or head.state in (A, Q)  # the SPSO is never past a live one
        snap = sp.snapshot()
        assert isinstance(snap, Snapshot) and all(isinstance(b, StateBatch) for b in snap.batches)


TestSharePartitionMachine = SharePartitionMachine.TestCase
TestSharePartitionMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
