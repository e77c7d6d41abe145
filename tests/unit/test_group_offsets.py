"""Committed offsets on the pure core (R3, R13): OffsetCommit checks, OffsetFetch, transactional
offsets pending per producer, markers, fencing, retention, DeleteGroups, OffsetDelete."""

from __future__ import annotations

import pytest

from oncelog.coordinator.group.consumer_protocol import encode_subscription
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.group.types import GroupSettings, OffsetCommitData
from oncelog.protocol.errors import (
    GroupIdNotFound,
    GroupSubscribedToTopic,
    GroupIdNotFound,
    IllegalGeneration,
    NonEmptyGroup,
    OffsetMetadataTooLarge,
    ProducerFenced,
    RebalanceInProgress,
    UnknownMemberId,
    UnstableOffsetCommit,
)
from oncelog.types import TopicPartition
from test_group_harness import Harness

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
DAY = 24 * 3600 * 1000


def test_simple_commit_creates_an_empty_group_and_fetch_returns_it() -> None:
    h = Harness()
    assert h.commit("solo", {T0: 10, T1: 20}) == {T0: None, T1: None}
    assert h.fetch("solo", T0, T1, U0) == {T0: 10, T1: 20, U0: None}
    assert h.fetch("solo") == {T0: 10, T1: 20}, "no partitions asked: every committed offset"
    assert h.shard.groups["solo"].state is GroupState.EMPTY
    o = h.shard.offsets.get("solo", T0)
    assert (o.leader_epoch, o.metadata, o.commit_timestamp) == (3, "m10", h.now)


def test_commit_with_a_generation_to_an_unknown_group_is_group_id_not_found() -> None:
    """GROUP_ID_NOT_FOUND (OffsetCommit v9+; the handler answers ILLEGAL_GENERATION below v9)."""
    h = Harness()
    with pytest.raises(GroupIdNotFound):
        h.commit("nope", {T0: 1}, generation=3, member_id="m")


def test_member_commits_are_checked_against_member_and_generation() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1)
    assert h.commit("g", {T0: 5}, generation=a.generation, member_id=a.member_id) == {T0: None}
    with pytest.raises(IllegalGeneration):
        h.commit("g", {T0: 6}, generation=a.generation - 1, member_id=a.member_id)
    with pytest.raises(UnknownMemberId):
        h.commit("g", {T0: 6}, generation=a.generation, member_id="ghost")
    with pytest.raises(UnknownMemberId):
        h.commit("g", {T0: 6})  # generation -1 into a group with members
    assert h.fetch("g", T0) == {T0: 5}


def test_commit_during_rebalance_phases() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    leader = a if a.members else b
    parked = h.join("g", leader.member_id)  # PreparingRebalance: commits still accepted
    assert h.commit("g", {T0: 1}, generation=leader.generation, member_id=leader.member_id) == {T0: None}
    other = b if leader is a else a
    h.join("g", other.member_id)
    res = h.answer(parked)  # CompletingRebalance
    with pytest.raises(RebalanceInProgress):
        h.commit("g", {T0: 2}, generation=res.generation, member_id=res.member_id)


def test_metadata_too_large_is_a_partition_error() -> None:
    h = Harness(GroupSettings(initial_rebalance_delay_ms=0, max_metadata_bytes=8))
    errors = h.run(h.shard.commit_offsets("g", -1, "", None, {T0: OffsetCommitData(1, -1, "x" * 9),
                                                               T1: OffsetCommitData(2, -1, None)}, h.now))
    assert isinstance(errors[T0], OffsetMetadataTooLarge) and errors[T1] is None
    assert h.fetch("g", T0, T1) == {T0: None, T1: 2}


def test_transactional_offsets_are_pending_until_commit_marker() -> None:
    h = Harness()
    h.commit("g", {T0: 1})
    assert h.txn_commit("g", 100, 0, {T0: 50, T1: 60}) == {T0: None, T1: None}
    assert h.fetch("g", T0, T1) == {T0: 1, T1: None}, "pending offsets are invisible"
    unstable = h.fetch("g", T0, T1, stable=True)
    assert isinstance(unstable[T0], UnstableOffsetCommit) and isinstance(unstable[T1], UnstableOffsetCommit)
    h.marker(100, 0, commit=True)
    assert h.fetch("g", T0, T1, stable=True) == {T0: 50, T1: 60}
    h.marker(100, 0, commit=True)  # a repeated marker changes nothing
    assert h.fetch("g", T0, T1) == {T0: 50, T1: 60}


def test_aborted_transactional_offsets_vanish() -> None:
    h = Harness()
    h.commit("g", {T0: 1})
    h.txn_commit("g", 100, 0, {T0: 50})
    h.marker(100, 0, commit=False)
    assert h.fetch("g", T0, stable=True) == {T0: 1}
    assert not h.shard.offsets.pending


def test_plain_commit_after_a_transactional_one_wins() -> None:
    h = Harness()
    h.txn_commit("g", 100, 0, {T0: 50})
    h.commit("g", {T0: 70})
    h.marker(100, 0, commit=True)
    assert h.fetch("g", T0) == {T0: 70}, "the transactional record is older in the log"


def test_stale_producer_epoch_is_fenced() -> None:
    h = Harness()
    h.txn_commit("g", 100, 3, {T0: 1})
    h.marker(100, 3, commit=True)
    with pytest.raises(ProducerFenced):
        h.txn_commit("g", 100, 2, {T0: 2})
    assert h.txn_commit("g", 100, 4, {T0: 3}) == {T0: None}


def test_kip447_group_metadata_is_checked() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1)
    assert h.txn_commit("g", 7, 0, {T0: 1}, generation=a.generation, member_id=a.member_id) == {T0: None}
    with pytest.raises(IllegalGeneration):
        h.txn_commit("g", 7, 0, {T0: 1}, generation=a.generation + 1, member_id=a.member_id)
    with pytest.raises(UnknownMemberId):
        h.txn_commit("g", 7, 0, {T0: 1}, generation=a.generation, member_id="ghost")
    with pytest.raises(UnknownMemberId):
        h.txn_commit("fresh", 8, 0, {T0: 1}, member_id="ghost")
    assert h.txn_commit("fresh", 8, 0, {T0: 1}) == {T0: None}, "no group metadata sent: not checked"


def test_simple_group_offsets_expire_from_their_commit_time() -> None:
    h = Harness(GroupSettings(initial_rebalance_delay_ms=0, offsets_retention_ms=DAY))
    h.commit("solo", {T0: 1})
    h.now += DAY // 2
    h.commit("solo", {T1: 2})
    h.now += DAY // 2
    h.run(h.shard.expire_offsets(h.now))
    assert h.fetch("solo", T0, T1) == {T0: None, T1: 2}
    h.now += DAY
    h.run(h.shard.expire_offsets(h.now))
    assert "solo" not in h.shard.groups, "an Empty group without offsets is deleted"
    assert "solo" not in h.reloaded().groups


def test_consumer_group_offsets_expire_once_the_group_has_been_empty_for_the_retention() -> None:
    h = Harness(GroupSettings(initial_rebalance_delay_ms=0, offsets_retention_ms=DAY))
    (a,) = h.stable_group("g", 1)
    h.commit("g", {T0: 5}, generation=a.generation, member_id=a.member_id)
    h.now += 2 * DAY
    h.run(h.shard.expire_offsets(h.now))
    assert h.fetch("g", T0) == {T0: 5}, "Stable group subscribed to t: kept"
    h.run(h.shard.leave_group("g", [(a.member_id, None)], h.now))
    h.now += DAY - 1
    h.run(h.shard.expire_offsets(h.now))
    assert h.fetch("g", T0) == {T0: 5}
    h.now += 1
    h.run(h.shard.expire_offsets(h.now))
    assert "g" not in h.shard.groups


def test_pending_and_explicitly_retained_offsets() -> None:
    h = Harness(GroupSettings(initial_rebalance_delay_ms=0, offsets_retention_ms=DAY))
    h.txn_commit("solo", 9, 0, {U0: 4})
    h.commit("solo", {T0: 1}, expire=h.now + 1000)
    h.now += 1000
    h.run(h.shard.expire_offsets(h.now))
    assert h.fetch("solo", T0) == {T0: None}, "the commit's own expire timestamp applies"
    h.now += 2 * DAY
    h.run(h.shard.expire_offsets(h.now))
    assert "solo" in h.shard.groups, "a transaction still holds offsets for it"
    h.marker(9, 0, commit=True)
    assert h.fetch("solo", U0) == {U0: 4}


def test_delete_group() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1)
    h.commit("g", {T0: 5}, generation=a.generation, member_id=a.member_id)
    with pytest.raises(NonEmptyGroup):
        h.shard.delete_group("g", h.now)
    with pytest.raises(GroupIdNotFound):
        h.shard.delete_group("nope", h.now)
    h.run(h.shard.leave_group("g", [(a.member_id, None)], h.now))
    h.run(h.shard.delete_group("g", h.now))
    assert "g" not in h.shard.groups and h.fetch("g", T0) == {T0: None}
    fresh = h.reloaded()
    assert "g" not in fresh.groups and not fresh.offsets.committed
    h.txn_commit("x", 1, 0, {T0: 1})
    with pytest.raises(NonEmptyGroup):
        h.shard.delete_group("x", h.now)


def test_offset_delete() -> None:
    h = Harness()
    h.commit("solo", {T0: 1, U0: 2})
    assert h.run(h.shard.delete_offsets("solo", [T0], h.now)) == {T0: None}
    assert h.fetch("solo", T0, U0) == {T0: None, U0: 2}
    with pytest.raises(GroupIdNotFound):
        h.shard.delete_offsets("nope", [T0], h.now)
    (a,) = h.stable_group("g", 1)  # subscribed to t
    h.commit("g", {T0: 1, U0: 2}, generation=a.generation, member_id=a.member_id)
    errors = h.run(h.shard.delete_offsets("g", [T0, U0], h.now))
    assert isinstance(errors[T0], GroupSubscribedToTopic) and errors[U0] is None
    assert h.fetch("g", T0, U0) == {T0: 1, U0: None}
    h.join_now("c", protocol_type="connect", protocols=(("x", encode_subscription(["t"])),))
    with pytest.raises(NonEmptyGroup):
        h.shard.delete_offsets("c", [T0], h.now)


def test_describe_and_list() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1)
    h.commit("solo", {T0: 1})
    assert sorted(h.shard.list_groups()) == [("g", "consumer", "Stable"), ("solo", "", "Empty")]
    d = h.shard.describe_group("g")
    assert d.state == "Stable" and d.protocol_data == "range" and d.members[0].member_id == a.member_id
    assert d.members[0].assignment and d.members[0].client_host == "/127.0.0.1"
    assert h.shard.describe_group("nope").state == "Dead"
