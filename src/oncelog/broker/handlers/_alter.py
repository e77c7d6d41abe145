"""Shared by AlterConfigs (33) and IncrementalAlterConfigs (44): change the configs of one
resource, a TOPIC, the BROKER's dynamic configs or a GROUP's configs (cluster mode: in the store):
the consumer group configs (``consumer.session.timeout.ms`` ..., broker/configuration/group_config.py)
and the share groups' (``share.auto.offset.reset`` ..., broker/coordinators/share_coordinator.py),
as Kafka 4.x does.

``alter(broker, type, name, change, validate_only)``: ``change`` maps the resource's current
configs to the complete new set (AlterConfigs: the request's set replaces them; Incremental:
SET / DELETE / APPEND / SUBTRACT on them). The new set is validated completely (INVALID_CONFIG
for an unknown topic config or a bad value, INVALID_REQUEST for a read-only broker config,
UNKNOWN_TOPIC_OR_PARTITION for a missing topic) before anything is written; with
``validate_only`` nothing is. Then the new set goes to the ``ConfigStore`` (broker/membership/):
a topic's configs to topics.json (embedded) or the store (cluster mode, where every broker's
leader tracker applies them), and its open partitions' LogConfig changes at once; broker configs
to ``<data-dir>/dynamic-broker-configs.json`` or the store, and every partition's LogConfig is
recomputed. No alter policy is configured, so POLICY_VIOLATION is never
given (as Kafka without ``alter.config.policy.class.name``).
"""

from __future__ import annotations

from typing import Callable

from oncelog.broker.configuration import group_config, topic_config
from oncelog.broker.context import BrokerContext
from oncelog.coordinator.share.configs import GROUP_CONFIGS, check_group_config
from oncelog.diskless import topic_rules
from oncelog.protocol.errors import InvalidConfig, InvalidRequest, KafkaStorageError

TOPIC, BROKER, GROUP = 2, 4, 32
Change = Callable[[dict[str, str], Callable[[str], str]], dict[str, str]]


async def alter(broker: BrokerContext, resource_type: int, name: str, change: Change, validate_only: bool) -> None:
    """Raises the KafkaError of the resource (see the module docstring)."""
    rm = broker.replicas
    if resource_type == TOPIC:
        if not name:
            raise InvalidRequest("a topic resource needs a topic name")
        meta = rm.topic(name)
        layers = rm.dynamic.layered()

        def effective(key: str) -> str:
            if key not in topic_config.TOPIC_CONFIGS:
                return ""
            return topic_config.effective(broker.config, meta.configs, key, layers)

        new = rm.validate_topic_configs(name, change(dict(meta.configs), effective))
        new = topic_rules.check_alter(name, meta.configs, new)  # issue 29: the engine is fixed at creation
        if validate_only:
            return
        await broker.configs.set_topic_configs(name, new)
    elif resource_type == BROKER:
        scope = rm.dynamic.scope_of(name)
        current = rm.dynamic.current(scope)

        def broker_value(key: str) -> str:
            return current.get(key, broker.config.kafka_value(key) or "")

        new = rm.dynamic.validate(change(current, broker_value), scope)
        rm.check_broker_configs(scope, new)
        if validate_only:
            return
        await broker.configs.set_broker_configs(scope, new)
    elif resource_type == GROUP:
        if not name:
            raise InvalidRequest("a group resource needs a group id")
        await _alter_group(broker, name, change, validate_only)
    else:
        raise InvalidRequest(f"resource type {resource_type} cannot be altered here (TOPIC 2 or BROKER 4; "
                             f"GROUP 32)")


async def _alter_group(broker: BrokerContext, name: str, change: Change, validate_only: bool) -> None:
    """A GROUP's configs: the consumer group configs (broker/configuration/group_config.py, kept
    by the group coordinator's ``configs``) and the share groups' (kept by the share coordinator
    with its state, KIP-932). The whole new set is checked before either part is written; each
    part is written only when it changed."""
    shares, configs = broker.shares, broker.groups.configs
    await shares.refresh_configs(name)  # cluster mode: as the store has them
    await configs.refresh()
    share_now, consumer_now = dict(shares.configs.get(name, {})), configs.of(name)

    def effective(key: str) -> str:
        if key in GROUP_CONFIGS:
            return shares.config(name, key)
        if key in group_config.CONSUMER:
            return group_config.layers(key, consumer_now, group_config.CONSUMER[key][0], broker.config)[0] or ""
        return ""

    new = change({**share_now, **consumer_now}, effective)
    for key in new:
        if key not in GROUP_CONFIGS and key not in group_config.CONSUMER:
            raise InvalidConfig(group_config.why_not_served(key) or f"Unknown group config name: {key}")
    new_consumer = group_config.validate(new, broker.config)
    new_share = {k: v for k, v in new.items() if k in GROUP_CONFIGS}
    for key, value in new_share.items():
        check_group_config(key, value)
    if validate_only:
        return
    if new_share != share_now:
        await shares.alter_configs(name, new_share, False)
    if new_consumer != consumer_now:
        try:
            await configs.set(name, new_consumer)
        except OSError as exc:
            raise KafkaStorageError(f"cannot write the configs of group {name!r}: {exc}") from None


def check_unique(names: list[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise InvalidRequest(f"Error due to duplicate config keys: {n}")
        seen.add(n)
