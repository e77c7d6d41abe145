"""The pure parts of transaction introspection (issue 17): ListTransactions' filters
(coordinator/transaction/listing.py) and find-hanging's decision (admin/transactions.py), driven
with given coordinator and producer states."""

from __future__ import annotations

import pytest

from oncelog.admin.transactions import (DEFAULT_MAX_TXN_TIMEOUT_MS, Description, Producer, abort_args,
                                        hanging_reason, parse_partition)
from oncelog.coordinator.transaction.listing import ListFilter, listed, partitions_by_topic
from oncelog.coordinator.transaction.metadata import TxnMetadata
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.types import TopicPartition

NOW = 10_000_000


def meta(tid: str, pid: int, state: TxnState, start: int = NOW - 5_000, parts=()) -> TxnMetadata:
    return TxnMetadata(tid, producer_id=pid, producer_epoch=0, state=state, start_ms=start,
                       partitions=frozenset(TopicPartition(t, p) for t, p in parts))


TXNS = [
    meta("a-1", 1, TxnState.ONGOING, parts=[("t", 0)]),
    meta("a-2", 2, TxnState.COMPLETE_COMMIT, start=NOW - 60_000),
    meta("b-1", 3, TxnState.EMPTY, start=-1),
    meta("dead", 4, TxnState.DEAD),
]


def ids(flt: ListFilter) -> list[str]:
    return [m.transactional_id for m in listed(TXNS, flt, NOW)]


def test_no_filter_lists_all_but_dead() -> None:
    assert ids(ListFilter()) == ["a-1", "a-2", "b-1"]


def test_state_filters_are_kafka_names_and_unknown_ones_are_reported() -> None:
    flt = ListFilter(states=("Ongoing", "CompleteCommit", "ongoing", "Nope"))
    assert ids(flt) == ["a-1", "a-2"]
    assert flt.unknown_states() == ("ongoing", "Nope")
    assert ids(ListFilter(states=("Nope",))) == []  # only unknown names: nothing matches


def test_producer_id_duration_and_pattern_filters() -> None:
    assert ids(ListFilter(producer_ids=(2, 3, 99))) == ["a-2", "b-1"]
    assert ids(ListFilter(min_duration_ms=10_000)) == ["a-2", "b-1"]  # never started (-1): as Kafka, "old"
    assert ids(ListFilter(min_duration_ms=5_000)) == ["a-2", "b-1"]  # strictly longer than the duration
    assert ids(ListFilter(min_duration_ms=4_999)) == ["a-1", "a-2", "b-1"]
    assert ids(ListFilter(pattern="a-.*")) == ["a-1", "a-2"]
    assert ids(ListFilter(pattern="a")) == []  # the whole id must match
    assert ids(ListFilter(pattern="")) == ["a-1", "a-2", "b-1"]
    with pytest.raises(KafkaError) as e:
        ids(ListFilter(pattern="("))
    assert e.value.code == ErrorCode.invalid_regular_expression


def test_partitions_only_while_active() -> None:
    assert partitions_by_topic(meta("x", 1, TxnState.ONGOING, parts=[("t", 1), ("t", 0), ("u", 2)])) == {
        "t": [0, 1], "u": [2]}
    assert partitions_by_topic(meta("x", 1, TxnState.COMPLETE_ABORT, parts=[("t", 1)])) == {}


# -- find-hanging ------------------------------------------------------------------------------

P = Producer("t", 0, producer_id=7, producer_epoch=3, last_sequence=4, last_timestamp=NOW - 1_000,
             coordinator_epoch=0, current_txn_start_offset=42)


def desc(state: str = "Ongoing", pid: int = 7, epoch: int = 3, parts=(("t", 0),), start: int = NOW - 1_000) -> Description:
    return Description("tx", 1, state, pid, epoch, 60_000, start, tuple(parts))


@pytest.mark.parametrize("coordinator,words", [
    (None, "no transaction coordinator knows producer 7"),
    (desc(pid=8), "now has producer 8"),
    (desc(state="CompleteCommit", parts=()), "is CompleteCommit"),
    (desc(state="Empty", parts=()), "is Empty"),
    (desc(parts=(("t", 1),)), "does not include t-0"),
    (desc(epoch=4), "has epoch 4"),
    (desc(start=NOW - DEFAULT_MAX_TXN_TIMEOUT_MS - 1), "longer than the maximum transaction timeout"),
])
def test_hanging_and_why(coordinator: Description | None, words: str) -> None:
    reason = hanging_reason(P, coordinator, NOW)
    assert reason is not None and words in reason


@pytest.mark.parametrize("coordinator", [
    desc(), desc(state="PrepareCommit"), desc(state="PrepareAbort", epoch=4),  # a fence bumps the epoch
    desc(start=NOW - DEFAULT_MAX_TXN_TIMEOUT_MS),
])
def test_not_hanging(coordinator: Description) -> None:
    assert hanging_reason(P, coordinator, NOW) is None


def test_without_an_open_transaction_nothing_hangs() -> None:
    closed = Producer("t", 0, 7, 3, 4, NOW - 10**9, 0, -1)
    assert hanging_reason(closed, None, NOW) is None


def test_age_falls_back_on_the_last_timestamp_and_a_custom_timeout() -> None:
    assert hanging_reason(P, desc(start=0), NOW, max_timeout_ms=500) is not None  # 0: never started
    assert hanging_reason(P, desc(start=0), NOW, max_timeout_ms=5_000) is None


def test_abort_args_and_partition_names() -> None:
    assert abort_args(P) == ("--topic", "t", "--partition", "0", "--start-offset", "42")
    assert parse_partition("orders-3") == ("orders", 3)
    assert parse_partition("orders") == ("orders", None)
    assert parse_partition("my-topic") == ("my-topic", None)
    assert parse_partition("my-topic-12") == ("my-topic", 12)


def test_a_forced_abort_of_a_committing_transaction_is_refused_not_reported_aborted(monkeypatch) -> None:
    """``--force`` on a live transaction fences it through its coordinator; but one whose
    coordinator is committing it (PrepareCommit) is decided: fencing only waits for the commit
    to finish, and the CLI then said "aborted" for a committed transaction (issue 26 row 6,
    review). Now it is refused with INVALID_TXN_STATE and nothing is fenced; an Ongoing one is
    still fenced."""
    from oncelog.admin.transactions import NotHanging, TransactionsAdmin

    fenced: list[str] = []
    admin = object.__new__(TransactionsAdmin)  # no connection: the decision alone
    live = Producer("t", 0, 7, 0, 0, 0, 0, 5)

    def not_hanging(state: str):  # type: ignore[no-untyped-def]
        def hanging_at(*_a: object, **_k: object) -> None:
            raise NotHanging("its coordinator knows it", live, "tid", 60_000, state)
        return hanging_at

    monkeypatch.setattr(admin, "fence", lambda tid, timeout_ms: fenced.append(tid), raising=False)
    monkeypatch.setattr(admin, "hanging_at", not_hanging("PrepareCommit"), raising=False)
    with pytest.raises(KafkaError) as caught:
        admin.abort_at("t", 0, 5, now_ms=0, force=True)
    assert caught.value.code == ErrorCode.invalid_txn_state and not fenced
    monkeypatch.setattr(admin, "hanging_at", not_hanging("Ongoing"), raising=False)
    assert admin.abort_at("t", 0, 5, now_ms=0, force=True) == live and fenced == ["tid"]
