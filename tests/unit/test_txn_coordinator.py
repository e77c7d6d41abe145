"""The transaction coordinator's core, driven directly on real partitions in a temporary data
directory with a manual clock: transitions, fencing, markers, timeouts, expiry, reload
(R8-R15, R19-R21)."""

from __future__ import annotations

import asyncio

import dataclasses
import itertools
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.clock import ManualClock
from oncelog.coordinator.transaction.rules import RULES, VALID_PREVIOUS, Request, check_transition, is_valid_transition
from oncelog.coordinator.transaction.state import TxnState
from txn_harness import TxnNode
from oncelog.protocol.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    InvalidTxnState,
    ProducerFenced,
)
from oncelog.types import TopicPartition

ORDERS0 = TopicPartition("orders", 0)
ORDERS1 = TopicPartition("orders", 1)
INVENTORY0 = TopicPartition("inventory", 0)


class Cluster(TxnNode):
    """A broker's storage and a transaction coordinator, restartable, without any sockets."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ManualClock())
    yield c
    c.close()


# -- the transition table ------------------------------------------------------------------------


@given(st.sampled_from(list(TxnState)), st.sampled_from(list(TxnState)))
def test_transition_table_is_the_only_authority(current: TxnState, target: TxnState) -> None:
    if current in VALID_PREVIOUS[target]:
        check_transition("t", current, target)
    else:
        with pytest.raises(InvalidTxnState, match=f"{current.kafka_name} -> {target.kafka_name}"):
            check_transition("t", current, target)


def test_every_state_is_reachable_from_empty() -> None:
    seen, frontier = {TxnState.EMPTY}, [TxnState.EMPTY]
    while frontier:
        s = frontier.pop()
        for t in TxnState:
            if is_valid_transition(s, t) and t not in seen:
                seen.add(t)
                frontier.append(t)
    assert seen == set(TxnState)


def test_prepared_outcome_is_final() -> None:
    """Once PrepareCommit/PrepareAbort is logged, only its own Complete state follows (R14)."""
    assert {t for t in TxnState if is_valid_transition(TxnState.PREPARE_COMMIT, t)} == {TxnState.COMPLETE_COMMIT}
    assert {t for t in TxnState if is_valid_transition(TxnState.PREPARE_ABORT, t)} == {TxnState.COMPLETE_ABORT}


# -- InitProducerId, fencing -----------------------------------------------------------------------


def test_init_bumps_epoch_and_keeps_producer_id(cluster: Cluster) -> None:
    pid, e0 = cluster.coord.init_producer_id("tx", 10_000)
    pid2, e1 = cluster.coord.init_producer_id("tx", 10_000)
    assert (pid2, e0, e1) == (pid, 0, 1)
    other, _ = cluster.coord.init_producer_id("other", 10_000)
    assert other != pid


def test_transaction_timeout_above_max_is_rejected(cluster: Cluster) -> None:
    with pytest.raises(InvalidTransactionTimeout, match="transaction.max.timeout.ms"):
        cluster.coord.init_producer_id("tx", 60_001)


def test_commit_writes_markers_everywhere_and_retried_end_txn_succeeds(cluster: Cluster) -> None:
    c = cluster.coord
    pid, epoch = c.init_producer_id("tx", 10_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0, INVENTORY0})
    cluster.produce(pid, epoch, ORDERS0, b"order-1")
    cluster.produce(pid, epoch, INVENTORY0, b"reserve-1")
    assert cluster.rm.partition("orders", 0).last_stable_offset == 0  # held by the open transaction
    c.end_txn("tx", pid, epoch, commit=True)
    assert c.txns["tx"].state is TxnState.COMPLETE_COMMIT
    assert cluster.committed_values(ORDERS0) == [b"order-1"]
    assert cluster.committed_values(INVENTORY0) == [b"reserve-1"]
    c.end_txn("tx", pid, epoch, commit=True)  # a retry after a lost answer (R19)
    with pytest.raises(InvalidTxnState):
        c.end_txn("tx", pid, epoch, commit=False)


def test_abort_is_invisible_to_read_committed_and_indexed(cluster: Cluster) -> None:
    c = cluster.coord
    pid, epoch = c.init_producer_id("tx", 10_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0})
    first = cluster.produce(pid, epoch, ORDERS0, b"aborted")
    c.end_txn("tx", pid, epoch, commit=False)
    part = cluster.rm.partition("orders", 0)
    assert cluster.committed_values(ORDERS0) == []
    [entry] = part.aborted.collect(0, part.high_watermark)
    assert (entry.producer_id, entry.first_offset) == (pid, first)
    assert part.last_stable_offset == part.high_watermark


def test_produce_to_partition_not_in_transaction_is_rejected(cluster: Cluster) -> None:
    c = cluster.coord
    pid, epoch = c.init_producer_id("tx", 10_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0})
    with pytest.raises(InvalidTxnState, match="orders-1"):
        cluster.produce(pid, epoch, ORDERS1, b"x")


def test_new_instance_fences_old_one_and_aborts_its_transaction(cluster: Cluster) -> None:
    c = cluster.coord
    pid, old = c.init_producer_id("tx", 10_000)
    c.add_partitions("tx", pid, old, {ORDERS0})
    cluster.produce(pid, old, ORDERS0, b"zombie")
    with pytest.raises(ConcurrentTransactions):
        c.init_producer_id("tx", 10_000)  # fences, aborts, asks the client to retry (R11)
    assert c.txns["tx"].state is TxnState.COMPLETE_ABORT
    pid2, new = c.init_producer_id("tx", 10_000)
    assert pid2 == pid and new == old + 2
    with pytest.raises(ProducerFenced):
        c.add_partitions("tx", pid, old, {ORDERS0})
    with pytest.raises(ProducerFenced):
        c.end_txn("tx", pid, old, commit=True)
    with pytest.raises(InvalidProducerEpoch):  # the zombie's late produce (R9)
        cluster.produce(pid, old, ORDERS0, b"late")
    assert cluster.committed_values(ORDERS0) == []


def test_unknown_producer_id_mapping(cluster: Cluster) -> None:
    pid, epoch = cluster.coord.init_producer_id("tx", 10_000)
    with pytest.raises(InvalidProducerIdMapping):
        cluster.coord.add_partitions("nope", pid, epoch, {ORDERS0})
    with pytest.raises(InvalidProducerIdMapping):
        cluster.coord.end_txn("tx", pid + 1, epoch, commit=True)


def test_kip360_retry_of_init_with_previous_epoch(cluster: Cluster) -> None:
    pid, e0 = cluster.coord.init_producer_id("tx", 10_000)
    pid, e1 = cluster.coord.init_producer_id("tx", 10_000, pid, e0)
    assert e1 == e0 + 1
    # the answer was lost; the client retries with the epoch it knew: same answer, no new bump
    assert cluster.coord.init_producer_id("tx", 10_000, pid, e0) == (pid, e1)
    with pytest.raises(ProducerFenced):
        cluster.coord.init_producer_id("tx", 10_000, pid, e0 - 1 if e0 else 99)


# -- failures: markers, restarts, timeouts, expiry ---------------------------------------------------


def test_marker_failure_does_not_block_other_partitions_and_is_retried(cluster: Cluster) -> None:
    c = cluster.coord
    pid, epoch = c.init_producer_id("tx", 10_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0, INVENTORY0})
    cluster.produce(pid, epoch, ORDERS0, b"o")
    cluster.produce(pid, epoch, INVENTORY0, b"i")
    cluster.fail_markers.add(INVENTORY0)
    c.end_txn("tx", pid, epoch, commit=True)  # the outcome is fixed: the answer is success
    assert c.txns["tx"].state is TxnState.PREPARE_COMMIT
    assert cluster.committed_values(ORDERS0) == [b"o"]
    assert cluster.committed_values(INVENTORY0) == []
    with pytest.raises(ConcurrentTransactions):
        c.add_partitions("tx", pid, epoch, {ORDERS0})
    cluster.fail_markers.clear()
    assert c.retry_unfinished() == 0
    assert c.txns["tx"].state is TxnState.COMPLETE_COMMIT
    assert cluster.committed_values(INVENTORY0) == [b"i"]


def test_failed_markers_are_retried_soon_without_the_cleanup_timer(cluster: Cluster) -> None:
    """A marker that failed (in a cluster: a partition between leaders) is tried again within a
    second, doubling the wait, not only at the cleanup interval (10 s by default)."""
    c = cluster.coord
    pid, epoch = c.init_producer_id("tx", 10_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0, INVENTORY0})
    cluster.produce(pid, epoch, ORDERS0, b"o")
    cluster.produce(pid, epoch, INVENTORY0, b"i")
    cluster.fail_markers.add(INVENTORY0)
    c.end_txn("tx", pid, epoch, commit=True)
    cluster.loop.run_until_complete(asyncio.sleep(0.4))  # one retry, still failing: next in 0.5 s
    assert c.txns["tx"].state is TxnState.PREPARE_COMMIT
    cluster.fail_markers.clear()
    cluster.loop.run_until_complete(asyncio.sleep(0.8))
    assert c.txns["tx"].state is TxnState.COMPLETE_COMMIT
    assert cluster.committed_values(INVENTORY0) == [b"i"]


def test_restart_after_prepare_finishes_the_transaction(cluster: Cluster) -> None:
    """Coordinator dies after PrepareCommit is logged, before any marker (R19)."""
    c = cluster.coord
    pid, epoch = c.init_producer_id("tx", 10_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0, INVENTORY0})
    cluster.produce(pid, epoch, ORDERS0, b"o")
    cluster.produce(pid, epoch, INVENTORY0, b"i")
    cluster.write_record("tx", TxnState.PREPARE_COMMIT)
    cluster.restart()
    assert cluster.coord.txns["tx"].state is TxnState.COMPLETE_COMMIT
    assert cluster.committed_values(ORDERS0) == [b"o"]
    assert cluster.committed_values(INVENTORY0) == [b"i"]
    cluster.coord.end_txn("tx", pid, epoch, commit=True)  # the producer's retry succeeds


def test_restart_keeps_ongoing_transaction_and_fencing(cluster: Cluster) -> None:
    c = cluster.coord
    pid, epoch = c.init_producer_id("tx", 10_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0})
    cluster.produce(pid, epoch, ORDERS0, b"o")
    cluster.restart()
    c = cluster.coord
    assert c.txns["tx"].state is TxnState.ONGOING
    assert cluster.rm.partition("orders", 0).last_stable_offset == 0  # still held after restart
    c.end_txn("tx", pid, epoch, commit=True)
    assert cluster.committed_values(ORDERS0) == [b"o"]


def test_timed_out_transaction_is_aborted_with_a_bumped_epoch(cluster: Cluster) -> None:
    c = cluster.coord
    pid, epoch = c.init_producer_id("tx", 5_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0})
    cluster.produce(pid, epoch, ORDERS0, b"hanging")
    part = cluster.rm.partition("orders", 0)
    cluster.clock.advance(4_000)
    assert c.abort_timed_out() == []
    assert part.last_stable_offset == 0
    cluster.clock.advance(2_000)
    assert c.abort_timed_out() == ["tx"]  # R20: the LSO is released
    assert part.last_stable_offset == part.high_watermark
    assert c.txns["tx"].producer_epoch == epoch + 1
    with pytest.raises(ProducerFenced):
        c.end_txn("tx", pid, epoch, commit=True)
    with pytest.raises(InvalidProducerEpoch):
        cluster.produce(pid, epoch, ORDERS0, b"late")


def test_idle_transactional_id_expires_with_a_tombstone(cluster: Cluster) -> None:
    c = cluster.coord
    pid, epoch = c.init_producer_id("tx", 5_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0})
    cluster.clock.advance(3_600_000)
    assert c.expire_transactional_ids() == []  # an ongoing transaction never expires
    c.end_txn("tx", pid, epoch, commit=False)
    cluster.clock.advance(3_599_999)
    assert c.expire_transactional_ids() == []
    cluster.clock.advance(1)
    assert c.expire_transactional_ids() == ["tx"]
    cluster.restart()
    assert "tx" not in cluster.coord.txns
    new_pid, new_epoch = cluster.coord.init_producer_id("tx", 5_000)
    assert new_pid != pid and new_epoch == 0


# -- a random walk: the reloaded state always equals the live one ------------------------------------

OPS = st.lists(
    st.sampled_from(["init", "add_o", "add_i", "produce_o", "produce_i", "commit", "abort", "tick", "restart", "crash"]),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_random_operations_keep_invariants(tmp_path_factory, ops: list[str]) -> None:
    cluster = Cluster(tmp_path_factory.mktemp("walk"), ManualClock())
    committed: dict[TopicPartition, list[bytes]] = {ORDERS0: [], INVENTORY0: []}
    pending: dict[TopicPartition, list[bytes]] = {ORDERS0: [], INVENTORY0: []}
    pid = epoch = -1
    counter = itertools.count()
    steps = {"ok": 0}
    for op in ["init", *ops]:
        c = cluster.coord
        try:
            if op == "init":
                pid, epoch = c.init_producer_id("tx", 10_000)
                pending = {tp: [] for tp in pending}
            elif op in ("add_o", "add_i"):
                c.add_partitions("tx", pid, epoch, {ORDERS0 if op == "add_o" else INVENTORY0})
            elif op in ("produce_o", "produce_i"):
                tp = ORDERS0 if op == "produce_o" else INVENTORY0
                value = f"v{next(counter)}".encode()
                cluster.produce(pid, epoch, tp, value)
                pending[tp].append(value)
            elif op in ("commit", "abort"):
                c.end_txn("tx", pid, epoch, commit=op == "commit")
                if op == "commit":
                    for tp in pending:
                        committed[tp].extend(pending[tp])
                pending = {tp: [] for tp in pending}
            elif op == "tick":
                cluster.clock.advance(6_000)
                if c.abort_timed_out():
                    pending = {tp: [] for tp in pending}
            elif op == "restart":
                before = {tid: dataclasses.replace(m, pending=None).record() for tid, m in c.txns.items()}
                cluster.restart()
                after = {tid: m.record() for tid, m in cluster.coord.txns.items()}
                assert after == before
            elif op == "crash":
                # The Complete* of the last end may not be in the log yet: the reloaded
                # coordinator completes it again (markers again, which write nothing), at its own
                # time; everything else is what the live coordinator had.
                def untimed(recs: dict) -> dict:
                    return {tid: dataclasses.replace(r, last_update_ms=0) for tid, r in recs.items()}

                before = untimed({tid: dataclasses.replace(m, pending=None).record() for tid, m in c.txns.items()})
                cluster.restart(crash=True)
                assert untimed({tid: m.record() for tid, m in cluster.coord.txns.items()}) == before
            steps["ok"] += 1
        except (ConcurrentTransactions, InvalidTxnState, InvalidProducerIdMapping, ProducerFenced, InvalidProducerEpoch):
            if op == "init":
                pending = {tp: [] for tp in pending}
        for tp in committed:
            assert cluster.committed_values(tp) == committed[tp]
            meta = cluster.coord.txns.get("tx")
            part = cluster.rm.partition(*tp)
            if meta is None or meta.state is not TxnState.ONGOING:
                assert part.last_stable_offset == part.high_watermark
    cluster.close()


# -- every state x every request ------------------------------------------------------------------------


def _put_in_state(cluster: Cluster, state: TxnState) -> tuple[int, int]:
    """Drive transactional id "tx" into ``state`` through the coordinator's own operations."""
    c = cluster.coord
    pid, epoch = c.init_producer_id("tx", 10_000)
    if state is TxnState.EMPTY:
        return pid, epoch
    c.add_partitions("tx", pid, epoch, {ORDERS0})
    cluster.produce(pid, epoch, ORDERS0, b"v")
    if state is TxnState.ONGOING:
        return pid, epoch
    if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        cluster.fail_markers.add(ORDERS0)  # markers cannot be written: the state stays Prepare*
        c.end_txn("tx", pid, epoch, commit=state is TxnState.PREPARE_COMMIT)
        return pid, epoch
    if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        c.end_txn("tx", pid, epoch, commit=state is TxnState.COMPLETE_COMMIT)
        return pid, epoch
    if state is TxnState.PREPARE_EPOCH_FENCE:
        cluster.write_record("tx", TxnState.PREPARE_EPOCH_FENCE, producer_epoch=epoch + 1)
        return pid, epoch
    raise AssertionError(state)


OK = None
# state -> request -> expected exception type (None: success). Requests use the current
# producer id and the epoch the producer holds.
EXPECTED: dict[TxnState, dict[str, type[Exception] | None]] = {
    TxnState.EMPTY: {"init": OK, "add": OK, "commit": InvalidTxnState, "abort": InvalidTxnState, "produce": InvalidTxnState},
    TxnState.ONGOING: {"init": ConcurrentTransactions, "add": OK, "commit": OK, "abort": OK, "produce": OK},
    TxnState.PREPARE_COMMIT: {"init": ConcurrentTransactions, "add": ConcurrentTransactions,
                              "commit": ConcurrentTransactions, "abort": InvalidTxnState, "produce": InvalidTxnState},
    TxnState.PREPARE_ABORT: {"init": ConcurrentTransactions, "add": ConcurrentTransactions,
                             "commit": InvalidTxnState, "abort": ConcurrentTransactions, "produce": InvalidTxnState},
    TxnState.COMPLETE_COMMIT: {"init": OK, "add": OK, "commit": OK, "abort": InvalidTxnState, "produce": InvalidTxnState},
    TxnState.COMPLETE_ABORT: {"init": OK, "add": OK, "commit": InvalidTxnState, "abort": OK, "produce": InvalidTxnState},
    TxnState.PREPARE_EPOCH_FENCE: {"init": ConcurrentTransactions, "add": ProducerFenced, "commit": ProducerFenced,
                                   "abort": ProducerFenced, "produce": InvalidProducerEpoch},
}


def _observe(tmp_path: Path, state: TxnState, request_kind: str) -> type[Exception] | None:
    """Put "tx" in ``state``, send ``request_kind`` with the producer's own id and epoch, and
    return what it was answered (None: success). A refusal must change nothing."""
    cluster = Cluster(tmp_path, ManualClock())
    try:
        pid, epoch = _put_in_state(cluster, state)
        assert cluster.coord.txns["tx"].state is state
        c = cluster.coord
        calls = {
            "init": lambda: c.init_producer_id("tx", 10_000),
            "add": lambda: c.add_partitions("tx", pid, epoch, {ORDERS0, INVENTORY0}),
            "commit": lambda: c.end_txn("tx", pid, epoch, commit=True),
            "abort": lambda: c.end_txn("tx", pid, epoch, commit=False),
            "produce": lambda: cluster.produce(pid, epoch, ORDERS0, b"w"),
        }
        before = c.txns["tx"].record()
        try:
            calls[request_kind]()
        except Exception as exc:  # noqa: BLE001 - what the client is told is the observation
            if not (isinstance(exc, ConcurrentTransactions) and state is TxnState.ONGOING):
                assert c.txns["tx"].record() == before, "a refused request changed the state"
            assert c.txns["tx"].pending is None
            return type(exc)
        assert c.txns["tx"].pending is None
        return None
    finally:
        cluster.close()


@pytest.mark.parametrize("state", list(EXPECTED), ids=lambda s: s.kafka_name)
@pytest.mark.parametrize("request_kind", ["init", "add", "commit", "abort", "produce"])
def test_every_state_against_every_request(tmp_path: Path, state: TxnState, request_kind: str) -> None:
    assert _observe(tmp_path, state, request_kind) is EXPECTED[state][request_kind]


@pytest.mark.parametrize(("state", "request_kind", "kind", "changed"), [
    (TxnState.COMPLETE_ABORT, "commit", Request.COMMIT, "OK"),
    (TxnState.PREPARE_COMMIT, "abort", Request.ABORT, "BUSY"),
    (TxnState.EMPTY, "commit", Request.COMMIT, "BUSY"),
    (TxnState.COMPLETE_COMMIT, "add", Request.ADD, "WRONG"),
])
def test_the_rules_table_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: TxnState,
                                 request_kind: str, kind: Request, changed: str) -> None:
    """Changing one cell of ``rules.RULES`` changes what the coordinator answers: the table in
    the code is the authority, and the behaviour test above catches any edit of it."""
    from oncelog.coordinator.transaction import rules

    monkeypatch.setitem(RULES[state], kind, getattr(rules, changed))
    assert _observe(tmp_path, state, request_kind) is not EXPECTED[state][request_kind]


# -- who the coordinator knows (issue 27: one lookup) ------------------------------------------------


def _shard_with_dead_id() -> Any:
    """A bare shard holding transactional id "dead" in the Dead state (a Dead record read from
    the log) and "live" in Empty, producer 7 epoch 0."""
    from oncelog.coordinator.transaction import log as txnlog
    from oncelog.coordinator.transaction.shard import TransactionShard, TxnSettings

    ids = itertools.count(100)
    shard = TransactionShard(0, TxnSettings(), new_producer_id=lambda: next(ids),
                             offsets_partition=lambda g: TopicPartition("__consumer_offsets", 0))
    for tid, state in (("dead", TxnState.DEAD), ("live", TxnState.EMPTY)):
        shard.replay(tid, txnlog.TxnRecord(7, -1, 0, -1, 60_000, state, frozenset(), -1, 0))
    return shard


@pytest.mark.parametrize("tid, pid", [("never-seen", 7), ("dead", 7), ("live", 8)])
def test_unknown_dead_or_another_producer_is_invalid_producer_id_mapping(tid: str, pid: int) -> None:
    """AddPartitionsToTxn, a TV2 implicit add, EndTxn (v4 and v5+) and AddOffsetsToTxn answer
    INVALID_PRODUCER_ID_MAPPING for an id the coordinator does not know (never seen, or Dead)
    and, for a known one, for a producer id that does not hold it."""
    shard: Any = _shard_with_dead_id()
    calls = [
        lambda: shard.add_partitions(tid, pid, 0, [ORDERS0], 1),
        lambda: shard.add_implicitly(tid, pid, 0, ORDERS0, 1),
        lambda: shard.add_offsets(tid, pid, 0, "g", 1),
        lambda: shard.end_txn(tid, pid, 0, True, 1),
    ]
    if tid != "live":  # EndTxn v5+ first asks whether the request is a retry of the last end
        calls.append(lambda: shard.end_txn(tid, pid, 0, True, 1, v2=True))
    for call in calls:
        with pytest.raises(InvalidProducerIdMapping):
            call()


def test_init_producer_id_starts_a_dead_id_afresh() -> None:
    shard: Any = _shard_with_dead_id()
    result = shard.init_producer_id("dead", 60_000, 1)
    assert [tid for tid, _ in result.records] == ["dead"]
    assert result.records[0][1].producer_id == 100  # a new producer id, not the Dead one's 7
