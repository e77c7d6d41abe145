"""DescribeConfigs (32): the configuration of topics and of this broker.

Topic entries say whether a value is the topic's own (source TOPIC_CONFIG) or inherited from the
broker (DEFAULT_CONFIG); ``configuration_keys`` filters. Broker entries list the broker's
properties under their Kafka names.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker import topic_config
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.DESCRIBE_CONFIGS
TOPIC, BROKER = 2, 4
SOURCE_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5


def _broker_rows(broker: BrokerContext) -> list[tuple[str, str | None, int]]:
    rows = []
    defaults = type(broker.config)()
    for f in dataclasses.fields(broker.config):
        value = getattr(broker.config, f.name)
        source = SOURCE_DEFAULT if value == getattr(defaults, f.name) else SOURCE_STATIC_BROKER
        rows.append((f.metadata["kafka"], None if value is None else str(value), source))
    return rows


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    results = []
    for res in req.resources:
        try:
            if res.resource_type == TOPIC:
                meta = broker.replicas.topic(res.resource_name)
                rows = [
                    (n, v, SOURCE_DEFAULT if d else SOURCE_TOPIC)
                    for n, v, d in topic_config.describe(broker.config, meta.configs)
                ]
            elif res.resource_type == BROKER:
                if res.resource_name not in ("", str(broker.node_id)):
                    raise InvalidRequest(f"broker {res.resource_name} is not this broker ({broker.node_id})")
                rows = _broker_rows(broker)
            else:
                raise InvalidRequest(f"resource type {res.resource_type} has no configs here")
            keys = set(res.configuration_keys) if res.configuration_keys else None
            configs = tuple(
                m.DescribeConfigsResourceResult(
                    name=n,
                    value=v,
                    read_only=res.resource_type == BROKER,
                    config_source=src,
                    is_sensitive=False,
                    synonyms=(),
                    config_type=0,
                    documentation=None,
                )
                for n, v, src in rows
                if keys is None or n in keys
            )
            results.append(
                m.DescribeConfigsResult(
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=configs,
                )
            )
        except KafkaError as exc:
            results.append(
                m.DescribeConfigsResult(
                    error_code=exc.code,
                    error_message=str(exc),
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=(),
                )
            )
    return m.DescribeConfigsResponse(results=tuple(results))
