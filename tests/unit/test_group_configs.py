"""Group configs (a GROUP resource; broker/configuration/group_config.py): the consumer group
configs KIP-848 adds (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``)
checked as Kafka 4.2's GroupConfig checks them, kept durably, and applied by the
consumer-protocol coordinator to the group's members; and DeleteGroups of a group whose last
member's session ended before the timer came round."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

import pytest

from oncelog.broker.configuration import group_config
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.configuration.group_config import FileGroupConfigs, GroupConfigs
from oncelog.broker.coordinators.offset_inbox import NoInbox
from oncelog.broker.coordinators.group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from oncelog.coordinator.share.configs import GROUP_CONFIGS as SHARE_GROUP_CONFIGS
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import ManualClock
from oncelog.coordinator.group import consumer_group as cg
from oncelog.coordinator.group.consumer_protocol import encode_assignment, encode_subscription
from oncelog.coordinator.group.types import JoinRequest
from oncelog.protocol.errors import InvalidConfig, MemberIdRequired

SESSION, HEARTBEAT = group_config.CONSUMER_SESSION, group_config.CONSUMER_HEARTBEAT
#: a broker whose bounds leave room (Kafka's defaults allow only 45-60 s and 5-15 s)
LOOSE = dataclasses.replace(BrokerConfig(), group_consumer_min_session_timeout_ms=1000,
                            group_consumer_min_heartbeat_interval_ms=100)


def test_values_are_checked_as_kafka_checks_them() -> None:
    broker = BrokerConfig()  # session 45000 in [45000, 60000], heartbeat 5000 in [5000, 15000]
    assert group_config.validate({SESSION: " 50000 ", "share.isolation.level": "x"}, broker) == {SESSION: "50000"}
    assert group_config.validate({}, broker) == {}

    def refused(configs: dict[str, str]) -> str:
        with pytest.raises(InvalidConfig) as e:
            group_config.validate(configs, broker)
        return str(e.value)

    assert refused({SESSION: "44999"}) == f"{SESSION} must be greater than or equal to group.consumer.min.session.timeout.ms"
    assert refused({SESSION: "60001"}) == f"{SESSION} must be less than or equal to group.consumer.max.session.timeout.ms"
    assert refused({HEARTBEAT: "4999"}) == f"{HEARTBEAT} must be greater than or equal to group.consumer.min.heartbeat.interval.ms"
    assert refused({HEARTBEAT: "15001"}) == f"{HEARTBEAT} must be less than or equal to group.consumer.max.heartbeat.interval.ms"
    assert refused({SESSION: "ten"}) == f"Invalid value ten for configuration {SESSION}: Not a number of type INT"
    assert refused({SESSION: "2147483648"}).endswith("Not a number of type INT")
    assert refused({HEARTBEAT: "0"}) == f"Invalid value 0 for configuration {HEARTBEAT}: Value must be at least 1"
    # the session must outlast the heartbeat, the broker's value standing in for the one not set
    assert refused_with(LOOSE, {SESSION: "4000"}) == f"{SESSION} must be greater than {HEARTBEAT}"  # 4000 <= 5000
    assert group_config.validate({SESSION: "4000", HEARTBEAT: "1000"}, LOOSE) == {SESSION: "4000", HEARTBEAT: "1000"}


def refused_with(broker: BrokerConfig, configs: dict[str, str]) -> str:
    with pytest.raises(InvalidConfig) as e:
        group_config.validate(configs, broker)
    return str(e.value)


def test_the_served_share_configs_are_the_share_groups_own() -> None:
    """group_config.KAFKA names as served by the share groups exactly what the share coordinator keeps."""
    served = {n for n, what in group_config.KAFKA.items() if what == group_config.SHARE}
    assert served == set(SHARE_GROUP_CONFIGS)
    assert group_config.why_not_served("streams.session.timeout.ms") is not None
    assert group_config.why_not_served(SESSION) is None


def test_applied_values_are_held_within_the_bounds_as_they_are_now() -> None:
    base = cg.ConsumerSettings(session_timeout_ms=45_000, heartbeat_interval_ms=5_000)
    got = group_config.consumer_timing({SESSION: "50000"}, base, BrokerConfig())
    assert (got.session_timeout_ms, got.heartbeat_interval_ms) == (50_000, 5_000)
    tighter = dataclasses.replace(BrokerConfig(), group_consumer_max_session_timeout_ms=48_000)
    assert group_config.consumer_timing({SESSION: "50000"}, base, tighter).session_timeout_ms == 48_000


def _heartbeat(group: str, member: str, epoch: int) -> cg.HeartbeatRequest:
    return cg.HeartbeatRequest(group, member, epoch, None, None, 30_000, ("t",) if epoch == 0 else None, None, None,
                               {} if epoch == 0 else None)


def test_the_pure_core_gives_each_group_its_own_session_timeout_and_heartbeat_interval() -> None:
    base = cg.ConsumerSettings(session_timeout_ms=45_000, heartbeat_interval_ms=5_000)
    own = {"fast": dataclasses.replace(base, session_timeout_ms=2_000, heartbeat_interval_ms=500)}
    groups = cg.ConsumerGroups(base, lambda: "m", lambda g: own.get(g, base))
    topics = {"t": (uuid.UUID(int=1), 2)}
    fast = groups.heartbeat(_heartbeat("fast", "a", 0), topics, now=0)
    slow = groups.heartbeat(_heartbeat("slow", "b", 0), topics, now=0)
    assert (fast.heartbeat_interval_ms, slow.heartbeat_interval_ms) == (500, 5_000)
    assert groups.tick(1_999) == []
    assert groups.tick(2_000) == [("fast", "a")]  # the group's own session timeout
    assert groups.tick(44_999) == []
    assert groups.tick(45_000) == [("slow", "b")]


def test_configs_are_durable_in_the_data_dir(tmp_path: Path) -> None:
    path = tmp_path / group_config.FILE_NAME
    configs = GroupConfigs(FileGroupConfigs(path))
    asyncio.run(configs.refresh())
    asyncio.run(configs.set("g1", {SESSION: "50000"}))
    asyncio.run(configs.set("g2", {HEARTBEAT: "6000"}))
    asyncio.run(configs.set("g2", {}))  # deleted: the group has none left
    again = GroupConfigs(FileGroupConfigs(path))
    asyncio.run(again.refresh())
    assert (again.groups(), again.of("g1"), again.of("g2")) == (["g1"], {SESSION: "50000"}, {})
    path.write_text("{not json")
    broken = GroupConfigs(FileGroupConfigs(path))
    asyncio.run(broken.refresh())  # logged, read as none (as the dynamic broker configs' file)
    assert broken.groups() == []


def _config(tmp: Path) -> BrokerConfig:
    return dataclasses.replace(LOOSE, data_dir=tmp, offsets_topic_num_partitions=3, group_initial_rebalance_delay_ms=0)


async def _coordinator(tmp: Path, clock: ManualClock) -> GroupCoordinator:
    rm = ReplicaManager(_config(tmp), clock)
    rm.open()
    if OFFSETS_TOPIC not in rm.topics:
        rm.create_topic(OFFSETS_TOPIC, 3, 1, {"cleanup.policy": "compact"}, internal=True)
        rm.create_topic("t", 2)
    gc = GroupCoordinator(rm, _config(tmp), clock, inbox=NoInbox(),
                          configs=GroupConfigs(FileGroupConfigs(tmp / group_config.FILE_NAME)))
    await gc.configs.refresh()
    gc.start()
    await asyncio.wait_for(gc.loaded.wait(), 10)
    return gc


def test_the_coordinator_applies_a_groups_configs_from_its_members_next_heartbeat(tmp_path: Path) -> None:
    async def go() -> None:
        clock = ManualClock()
        gc = await _coordinator(tmp_path, clock)
        try:
            first = await gc.consumer_heartbeat(_heartbeat("g", "m1", 0))
            assert first.heartbeat_interval_ms == 5_000  # the broker's group.consumer.heartbeat.interval.ms
            await gc.configs.set("g", {SESSION: "3000", HEARTBEAT: "700"})
            again = await gc.consumer_heartbeat(_heartbeat("g", "m1", first.member_epoch))
            assert again.heartbeat_interval_ms == 700
            clock.advance(3_000)  # the group's session timeout, not the broker's 45 s
            await asyncio.sleep(0.3)  # the timer comes round
            assert not gc.shards[gc.partition_for("g")].consumers.groups["g"].members
        finally:
            await gc.stop()
        # a restarted coordinator has them from the data dir
        gc = await _coordinator(tmp_path, clock)
        try:
            assert gc.configs.of("g") == {SESSION: "3000", HEARTBEAT: "700"}
            assert (await gc.consumer_heartbeat(_heartbeat("g", "m2", 0))).heartbeat_interval_ms == 700
        finally:
            await gc.stop()

    asyncio.run(go())


def _join(group: str, member_id: str = "") -> JoinRequest:
    return JoinRequest(group, member_id, None, "consumer", (("range", encode_subscription(["t"])),), 6_000, 6_000,
                       "c", "/127.0.0.1", require_known_member_id=True)


def test_delete_groups_ends_the_sessions_that_ended_before_it(tmp_path: Path) -> None:
    """A classic group whose only member's session timed out just before DeleteGroups is empty,
    though the coordinator's timer (every 50 ms) has not come round: librdkafka's 0081 deletes
    its groups exactly one session timeout after closing their static members. Before: NON_EMPTY_GROUP."""
    async def go() -> None:
        clock = ManualClock()
        gc = await _coordinator(tmp_path, clock)
        try:
            try:
                await gc.join_group(_join("cg"))
            except MemberIdRequired as exc:
                res = await gc.join_group(_join("cg", exc.member_id))  # type: ignore[attr-defined]
            await gc.sync_group("cg", res.generation, res.member_id, None, "consumer", "range",
                                {res.member_id: encode_assignment({"t": [0, 1]})})
            clock.advance(6_000)  # its session is over; no await lets the timer run before DeleteGroups
            await gc.delete_group("cg")
            assert "cg" not in gc.shards[gc.partition_for("cg")].groups
        finally:
            await gc.stop()

    asyncio.run(go())
