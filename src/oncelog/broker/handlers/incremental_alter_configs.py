"""IncrementalAlterConfigs (44, v0-v1): SET, DELETE, APPEND, SUBTRACT on the configs of a topic
or of the broker's dynamic configs (handlers/_alter.py). APPEND and SUBTRACT apply to LIST configs
only (INVALID_CONFIG otherwise) and start from the effective value (the default when the resource
does not set it), as Kafka does; a key twice in one resource is INVALID_REQUEST. Errors are per
resource; ``validate_only`` changes nothing.
"""

from __future__ import annotations

from typing import Any, Callable

from oncelog.broker.configuration import dynamic_kafka_configs as kafka_dynamic
from oncelog.broker.configuration import topic_config
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.configuration.dynamic_config import BROKER_SYNONYMS
from oncelog.broker.handlers import _acl, _alter
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidConfig, InvalidRequest, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.INCREMENTAL_ALTER_CONFIGS
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _is_list(resource_type: int, name: str) -> bool:
    if resource_type != _alter.TOPIC and name not in BROKER_SYNONYMS:
        return kafka_dynamic.config_type(name) is topic_config.ConfigType.LIST  # sasl.enabled.mechanisms ...
    d = topic_config.TOPIC_CONFIGS.get(name) if resource_type == _alter.TOPIC else BROKER_SYNONYMS.get(name)
    return d is not None and d.type is topic_config.ConfigType.LIST


def apply_ops(resource_type: int, ops: list[tuple[str, int, str | None]], current: dict[str, str],
              effective: Callable[[str], str]) -> dict[str, str]:
    """The configs after ``ops`` ((name, operation, value) in request order). Raises
    InvalidConfig (APPEND/SUBTRACT on a non-LIST config), InvalidRequest (unknown operation)."""
    new = dict(current)
    for name, op, value in ops:
        if op == SET:
            new[name] = value  # type: ignore[assignment]  # None: checked by validation
        elif op == DELETE:
            new.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if not _is_list(resource_type, name):
                raise InvalidConfig(f"Config value {'append' if op == APPEND else 'subtract'} is not allowed "
                                    f"for config key: {name}")
            base = new[name] if name in new else effective(name)
            items = [i.strip() for i in base.split(",") if i.strip()]
            given = [i.strip() for i in (value or "").split(",") if i.strip()]
            if op == APPEND:
                items += [g for g in given if g not in items]
            else:
                items = [i for i in items if i not in given]
            new[name] = ",".join(items)
        else:
            raise InvalidRequest(f"unknown config operation {op} for {name}")
    return new


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    out = []
    g = _acl.gate(broker, client, API_KEY)
    for res in req.resources:
        try:
            _acl.check_config_resource(g, res.resource_type, res.resource_name)  # issue 18: ALTER_CONFIGS
            _alter.check_unique([c.name for c in res.configs])
            ops = [(c.name, c.config_operation, c.value) for c in res.configs]
            for name, op, value in ops:
                if op == SET and value is None:
                    raise InvalidRequest(f"Null value not supported for : {name}")
            await _alter.alter(broker, res.resource_type, res.resource_name,
                               lambda cur, eff: apply_ops(res.resource_type, ops, cur, eff), bool(req.validate_only))
            out.append(m.AlterConfigsResourceResponse(error_code=ErrorCode.none, error_message=None,
                                                      resource_type=res.resource_type, resource_name=res.resource_name))
        except KafkaError as exc:
            out.append(m.AlterConfigsResourceResponse(error_code=exc.code, error_message=str(exc),
                                                      resource_type=res.resource_type, resource_name=res.resource_name))
    return m.IncrementalAlterConfigsResponse(responses=tuple(out))
