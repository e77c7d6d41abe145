"""DescribeConfigs (32): the configuration of topics and of this broker, as Kafka 4.x describes it.

A topic lists every topic config Kafka has (broker/configuration/topic_config.py's table) with its type, its
effective value and that value's source: the topic's own (DYNAMIC_TOPIC_CONFIG) or inherited from
the broker (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
DEFAULT_CONFIG); synonyms (every value that applies, highest precedence first) when
``include_synonyms``; documentation (v3+) when ``include_documentation``. A broker (resource name
= its node id) lists its configs under Kafka's names (broker/configuration/dynamic_config.py); resource name ""
lists the dynamic cluster defaults. A GROUP lists the group configs served here: the consumer
group configs (KIP-848, broker/configuration/group_config.py) and the share groups' (KIP-932,
broker/coordinators/share_coordinator.py), whether or not the group exists (as Kafka). Nothing here is sensitive (no passwords are configured).
``configuration_keys`` filters. Errors are per resource.

Bounded work (issue 26 row 9): describing one topic costs milliseconds (every config resolved
through its synonyms), and a request may name 100,000 resources (the broker's bound on array
entries, protocol/schema_reader.py): 20,000 copies of one topic took 75 s on the event loop and
an 83 MB answer. So a resource named more than once (same type, name and keys) is described and
answered once — Kafka's own AdminClient never sends one twice, and clients match results by
resource — so the answer is bounded by the topics that exist; and the handler yields to the
event loop after each resource it describes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from oncelog.broker.configuration import topic_config
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _share
from oncelog.broker.configuration.dynamic_config import broker_config_rows
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.DESCRIBE_CONFIGS
YIELD_EVERY = 10  # resources described between yields to the event loop
TOPIC, BROKER, GROUP = 2, 4, 32

#: (name, value, read_only, source, synonyms [(name, value, source)], type, doc)
Row = tuple[str, "str | None", bool, int, list, int, str]


def topic_rows(broker: BrokerContext, name: str) -> list[Row]:
    """Every topic config of ``name``; raises UnknownTopicOrPartition."""
    meta = broker.replicas.topic(name)
    layers = broker.replicas.dynamic.layered()
    return [(d.name, syn[0][1], False, int(syn[0][2]), syn, int(d.type), d.doc)
            for d, syn in topic_config.describe(broker.config, meta.configs, layers)]


def _broker_rows(broker: BrokerContext, resource_name: str) -> list[Row]:
    scope = broker.replicas.dynamic.scope_of(resource_name)
    return [(r.name, r.value, r.read_only, int(r.source), list(r.synonyms), int(r.type), r.doc)
            for r in broker_config_rows(broker.config, broker.replicas.dynamic, default_only=scope == "default")]


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    synonyms_wanted = bool(getattr(req, "include_synonyms", False))
    docs_wanted = bool(getattr(req, "include_documentation", False))
    results = []
    g = _acl.gate(broker, client, API_KEY)
    seen: set[tuple[int, str, tuple[str, ...] | None]] = set()
    for res in req.resources:
        key = (res.resource_type, res.resource_name,
               tuple(res.configuration_keys) if res.configuration_keys is not None else None)
        if key in seen:
            continue  # named twice: answered once
        seen.add(key)
        if len(seen) % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # describing a topic costs milliseconds: let others in
        try:
            _acl.check_config_resource(g, res.resource_type, res.resource_name)  # issue 18: DESCRIBE_CONFIGS
            if res.resource_type == TOPIC:
                rows = topic_rows(broker, res.resource_name)
            elif res.resource_type == BROKER:
                rows = _broker_rows(broker, res.resource_name)
            elif res.resource_type == GROUP:
                await broker.shares.refresh_configs(res.resource_name)  # cluster mode: the store's
                await broker.groups.configs.refresh()
                rows = _share.group_config_rows(broker, res.resource_name)
            else:
                raise InvalidRequest(f"resource type {res.resource_type} has no configs here")
            keys = set(res.configuration_keys) if res.configuration_keys else None
            configs = tuple(
                m.DescribeConfigsResourceResult(
                    name=n,
                    value=v,
                    read_only=ro,
                    config_source=src,
                    is_sensitive=False,
                    synonyms=tuple(m.DescribeConfigsSynonym(name=sn, value=sv, source=int(ss)) for sn, sv, ss in syn)
                    if synonyms_wanted else (),
                    config_type=typ,
                    documentation=(doc or None) if docs_wanted else None,
                )
                for n, v, ro, src, syn, typ, doc in rows
                if keys is None or n in keys
            )
            results.append(m.DescribeConfigsResult(error_code=ErrorCode.none, error_message=None,
                                                   resource_type=res.resource_type,
                                                   resource_name=res.resource_name, configs=configs))
        except KafkaError as exc:
            results.append(m.DescribeConfigsResult(error_code=exc.code, error_message=str(exc),
                                                   resource_type=res.resource_type,
                                                   resource_name=res.resource_name, configs=()))
    return m.DescribeConfigsResponse(results=tuple(results))
