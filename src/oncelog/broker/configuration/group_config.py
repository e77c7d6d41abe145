"""Group configs (a GROUP resource of IncrementalAlterConfigs / DescribeConfigs): Kafka 4.2's
``GroupConfig``, and the consumer group configs (KIP-848) this broker keeps and applies.

Theory of operation. Kafka 4.2's ``GroupConfig`` has consumer group configs
(``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``), share group configs
(``share.*``, KIP-932) and streams group configs (``streams.*``, KIP-1071). ``KAFKA`` lists
them all with what oncelog does with each:

* the consumer group configs are checked here as Kafka checks them (``validate``: an INT of at
  least 1, within the broker's ``group.consumer.min/max.*`` bounds, the session timeout above
  the heartbeat interval, the broker's value standing in for the one a group does not set; each
  failure INVALID_CONFIG with Kafka's message), kept by ``GroupConfigs`` (durable: the data
  dir's ``group-configs.json``, replaced atomically; in cluster mode the store's
  ``oncelog_group_config``, cluster/group_configs.py: the membership hands in which) and applied by the consumer-protocol group
  coordinator at every heartbeat of the group's members (``consumer_timing``): the session
  timeout it holds a member to and the heartbeat interval it hands out;
* the share group configs oncelog's share groups have are checked and kept by the share
  coordinator with its state (coordinator/share/configs.py, ``GROUP_CONFIGS``);
* the others (the share groups' own session timeout, heartbeat interval and lock cap, and every
  streams group config: oncelog has no streams groups) are refused with INVALID_CONFIG naming
  them as not served here, rather than stored and described as if they applied.

As in Kafka, a group's configs do not make a group: they may be set before the group exists,
and deleting a consumer group leaves them.

``GroupConfigs`` runs on the broker's event loop; the rest is pure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol

from oncelog.atomic import write_atomically
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.configuration.topic_config import ConfigSource, ConfigType
from oncelog.coordinator.group.consumer_group import ConsumerSettings
from oncelog.protocol.errors import InvalidConfig, KafkaError

log = logging.getLogger(__name__)

FILE_NAME = "group-configs.json"

CONSUMER_SESSION = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT = "consumer.heartbeat.interval.ms"

#: the consumer group configs -> (the broker config it defaults to, its min bound, its max bound)
CONSUMER: dict[str, tuple[str, str, str]] = {
    CONSUMER_SESSION: ("group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
                       "group.consumer.max.session.timeout.ms"),
    CONSUMER_HEARTBEAT: ("group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
                         "group.consumer.max.heartbeat.interval.ms"),
}
_DOC = {
    CONSUMER_SESSION: "The timeout to detect a member of the group that stopped heartbeating (its "
                      "members' session timeout); the broker's group.consumer.session.timeout.ms when unset.",
    CONSUMER_HEARTBEAT: "The interval at which the group's members are told to heartbeat; the broker's "
                        "group.consumer.heartbeat.interval.ms when unset.",
}

#: Kafka 4.2's group configs -> what oncelog does with each (docs/COMPATIBILITY-configs.md)
APPLIED, SHARE, NOT_SERVED = "applied", "share", "not served"
KAFKA: dict[str, str] = {
    CONSUMER_SESSION: APPLIED, CONSUMER_HEARTBEAT: APPLIED,
    "share.auto.offset.reset": SHARE, "share.isolation.level": SHARE, "share.record.lock.duration.ms": SHARE,
    "share.delivery.count.limit": SHARE, "share.renew.acknowledge.enable": SHARE,
    "share.session.timeout.ms": NOT_SERVED, "share.heartbeat.interval.ms": NOT_SERVED,
    "share.partition.max.record.locks": NOT_SERVED,
    "streams.session.timeout.ms": NOT_SERVED, "streams.heartbeat.interval.ms": NOT_SERVED,
    "streams.num.standby.replicas": NOT_SERVED, "streams.initial.rebalance.delay.ms": NOT_SERVED,
}
_WHY_NOT = {
    "share": "share groups here take their session timeout, heartbeat interval and lock cap from the broker's "
             "group.share.* configs",
    "streams": "oncelog has no streams groups (KIP-1071)",
}


def why_not_served(name: str) -> str | None:
    """Why a Kafka group config is refused here (None: served, or not a Kafka group config)."""
    if KAFKA.get(name) != NOT_SERVED:
        return None
    return f"group config {name} is not served here: {_WHY_NOT[name.split('.', 1)[0]]}"


def _int(name: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}: Not a number of type INT") from None
    if not -2**31 <= value < 2**31:
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}: Not a number of type INT")
    if value < 1:
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}: Value must be at least 1")
    return value


def validate(configs: Mapping[str, str], broker: BrokerConfig) -> dict[str, str]:
    """The consumer group configs of ``configs`` (every other name is ignored) normalised, checked
    as Kafka 4.2's ``GroupConfig.validate`` checks them against the broker's bounds. Raises
    InvalidConfig with Kafka's message."""
    out: dict[str, str] = {}
    for name in CONSUMER:
        if name in configs:
            out[name] = str(_int(name, configs[name]))
    effective = {name: int(out.get(name) or broker.kafka_value(default) or 0)
                 for name, (default, _, _) in CONSUMER.items()}
    for name, (_, lo, hi) in CONSUMER.items():
        if name not in out:
            continue
        if effective[name] < int(broker.kafka_value(lo) or 0):
            raise InvalidConfig(f"{name} must be greater than or equal to {lo}")
        if effective[name] > int(broker.kafka_value(hi) or 0):
            raise InvalidConfig(f"{name} must be less than or equal to {hi}")
    if out and effective[CONSUMER_SESSION] <= effective[CONSUMER_HEARTBEAT]:
        raise InvalidConfig(f"{CONSUMER_SESSION} must be greater than {CONSUMER_HEARTBEAT}")
    return out


def consumer_timing(own: Mapping[str, str], base: ConsumerSettings, broker: BrokerConfig) -> ConsumerSettings:
    """``base`` (the broker's group.consumer.* settings) with a group's own session timeout and
    heartbeat interval, each held within the broker's bounds as they are now (they may have
    been lowered since the value was set: Kafka's ``GroupConfig.evaluate`` caps it the same way)."""
    def held(name: str, fallback: int) -> int:
        raw = own.get(name)
        if raw is None:
            return fallback
        _, lo, hi = CONSUMER[name]
        return min(max(int(raw), int(broker.kafka_value(lo) or 1)), int(broker.kafka_value(hi) or raw))

    return dataclasses.replace(base, session_timeout_ms=held(CONSUMER_SESSION, base.session_timeout_ms),
                               heartbeat_interval_ms=held(CONSUMER_HEARTBEAT, base.heartbeat_interval_ms))


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One config of a GROUP resource as DescribeConfigs lists it."""

    name: str
    value: str | None
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]  # effective first
    type: ConfigType
    doc: str

    @property
    def source(self) -> ConfigSource:
        return self.synonyms[0][2]


def describe(own: Mapping[str, str], broker: BrokerConfig) -> list[GroupRow]:
    """The consumer group configs of a group with ``own`` configs: its value (GROUP_CONFIG), else
    the broker config it defaults to (STATIC_BROKER_CONFIG when the broker sets it, else
    DEFAULT_CONFIG)."""
    rows = []
    for name, (default, _, _) in sorted(CONSUMER.items()):
        rows.append(GroupRow(name, *layers(name, own, default, broker), ConfigType.INT, _DOC[name]))
    return rows


def layers(name: str, own: Mapping[str, str], broker_name: str,
           broker: BrokerConfig) -> tuple[str | None, tuple[tuple[str, str | None, ConfigSource], ...]]:
    """(value, synonyms) of a group config that defaults to the broker config ``broker_name``:
    the group's own value (GROUP_CONFIG) first, then the broker's (STATIC_BROKER_CONFIG when
    its properties set it, else DEFAULT_CONFIG)."""
    syn: list[tuple[str, str | None, ConfigSource]] = []
    if name in own:
        syn.append((name, own[name], ConfigSource.GROUP_CONFIG))
    value = broker.kafka_value(broker_name)
    static = value != broker.kafka_default(broker_name)
    syn.append((broker_name, value, ConfigSource.STATIC_BROKER_CONFIG if static else ConfigSource.DEFAULT_CONFIG))
    return syn[0][1], tuple(syn)


class GroupConfigStore(Protocol):
    """Where the groups' configs are kept: the data dir's file (``FileGroupConfigs``, embedded)
    or the store's ``oncelog_group_config`` (broker/membership/postgres.py adapts
    cluster/group_configs.py). The membership picks one when it is built."""

    async def set(self, group_id: str, configs: dict[str, str], every: dict[str, dict[str, str]]) -> None:
        """Make ``configs`` the group's configs (``every``: all groups' configs with this change
        in, for a store that rewrites them whole), durable before this returns."""
        ...

    async def load_if_changed(self, version: int | None) -> tuple[int, dict[str, dict[str, str]] | None]:
        """(the store's change counter, every group's configs; None when the counter is still
        ``version``)."""
        ...


class FileGroupConfigs:
    """``GroupConfigStore`` on ``<data-dir>/group-configs.json``, replaced atomically at each
    change. Only this broker writes it, so it is read once (``version`` None)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def set(self, group_id: str, configs: dict[str, str], every: dict[str, dict[str, str]]) -> None:
        doc = {"version": 1, "groups": {g: c for g, c in sorted(every.items()) if c}}
        write_atomically(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())

    async def load_if_changed(self, version: int | None) -> tuple[int, dict[str, dict[str, str]] | None]:
        """The file's configs the first time (none when it is missing; an unreadable file is
        logged and read as none, until a group's configs are set again); None after."""
        if version is not None:
            return version, None
        try:
            doc = json.loads(self.path.read_text())
            groups = doc["groups"]
            return 0, {str(g): {str(k): str(v) for k, v in c.items()} for g, c in groups.items() if c}
        except FileNotFoundError:
            return 0, {}
        except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
            log.error("%s is unreadable (%s); group configs ignored until set again", self.path, exc)
            return 0, {}


class GroupConfigs:
    """Every group's own consumer group configs as this broker knows them (group id -> name ->
    value; groups without any are absent), kept by ``store`` (the membership's choice, handed in
    at construction). ``refresh`` loads them (at start, and in cluster mode after each metadata
    poll through ``refresh_soon``, when the store's change counter moved); ``set`` writes them
    through the store (in cluster mode every broker is notified)."""

    def __init__(self, store: GroupConfigStore) -> None:
        self.store = store
        self.by_group: dict[str, dict[str, str]] = {}
        self._refreshing: asyncio.Task[None] | None = None
        self._version: int | None = None
        #: group -> its ConsumerSettings as ``consumer_timing`` made them (cleared on any change)
        self._timing: dict[str, ConsumerSettings] = {}

    def of(self, group_id: str) -> dict[str, str]:
        return dict(self.by_group.get(group_id, {}))

    def groups(self) -> list[str]:
        """The groups with configs of their own, sorted."""
        return sorted(self.by_group)

    def consumer_settings(self, group_id: str, base: ConsumerSettings, broker: BrokerConfig) -> ConsumerSettings:
        """The settings the consumer-protocol coordinator applies to ``group_id``'s members."""
        own = self.by_group.get(group_id)
        if not own:
            return base
        got = self._timing.get(group_id)  # ``base`` and ``broker`` are the coordinator's, fixed at start
        if got is None:
            got = self._timing[group_id] = consumer_timing(own, base, broker)
        return got

    async def set(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Make ``configs`` (``validate``d) the whole set of the group's consumer group configs,
        durable before this returns. Raises OSError (embedded) or StoreUnavailable."""
        configs = dict(configs)
        await self.store.set(group_id, configs, {**self.by_group, group_id: configs})
        self._put(group_id, configs)

    async def refresh(self) -> None:
        """Reload every group's configs if the store's change counter moved since the last load
        (one small read otherwise; the file is read once). Raises StoreUnavailable."""
        version, groups = await self.store.load_if_changed(self._version)
        if groups is not None:
            self._replace(groups)
        self._version = version

    def refresh_soon(self) -> None:
        """``refresh`` in the background (cluster mode, after each metadata poll: the poll does
        not wait for it, so a notification that comes meanwhile starts the next poll at once);
        one at a time, a failure logged (the next poll tries again)."""
        if self._refreshing is not None and not self._refreshing.done():
            return
        self._refreshing = asyncio.get_running_loop().create_task(self._refresh_logged())

    async def _refresh_logged(self) -> None:
        try:
            await self.refresh()
        except KafkaError as exc:
            log.info("group configs not reloaded from the store (next poll tries again): %s", exc)

    async def close(self) -> None:
        """Wait for a background ``refresh`` to end."""
        if self._refreshing is not None:
            self._refreshing.cancel()
            await asyncio.gather(self._refreshing, return_exceptions=True)

    def _put(self, group_id: str, configs: dict[str, str]) -> None:
        if configs:
            self.by_group[group_id] = configs
        else:
            self.by_group.pop(group_id, None)
        self._timing.pop(group_id, None)

    def _replace(self, groups: dict[str, dict[str, str]]) -> None:
        self.by_group = groups
        self._timing = {}


_KAFKA_TYPES = {"share.auto.offset.reset": "STRING", "share.isolation.level": "STRING",
                "share.renew.acknowledge.enable": "BOOLEAN"}


def compatibility_table() -> str:
    """The Markdown table of docs/COMPATIBILITY-configs.md's group section (generated)."""
    rows = ["| config | type | here |", "|---|---|---|"]
    for name, what in sorted(KAFKA.items()):
        if what == APPLIED:
            here = (f"applied by the consumer groups' coordinator at each heartbeat (default: the broker's "
                    f"`{CONSUMER[name][0]}`, bounds `{CONSUMER[name][1]}` / `{CONSUMER[name][2]}`)")
        elif what == SHARE:
            here = "applied by the share groups (kept with their state)"
        else:
            here = "refused (INVALID_CONFIG): " + _WHY_NOT[name.split(".", 1)[0]]
        rows.append(f"| `{name}` | {_KAFKA_TYPES.get(name, 'INT')} | {here} |")
    return "\n".join(rows) + "\n"
