"""AlterConfigs (33, v0-v2): replace the whole set of configs of a topic or of the broker's
dynamic configs (handlers/_alter.py). A config with a null value is refused (INVALID_REQUEST), as
Kafka does; errors are per resource; ``validate_only`` changes nothing.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _alter
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.ALTER_CONFIGS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    out = []
    g = _acl.gate(broker, client, API_KEY)
    for res in req.resources:
        try:
            _acl.check_config_resource(g, res.resource_type, res.resource_name)  # issue 18: ALTER_CONFIGS
            _alter.check_unique([c.name for c in res.configs])
            nulls = [c.name for c in res.configs if c.value is None]
            if nulls:
                raise InvalidRequest(f"Null value not supported for : {', '.join(nulls)}")
            wanted = {c.name: c.value for c in res.configs}
            await _alter.alter(broker, res.resource_type, res.resource_name, lambda _cur, _eff: dict(wanted),
                               bool(req.validate_only))
            out.append(m.AlterConfigsResourceResponse(error_code=ErrorCode.none, error_message=None,
                                                      resource_type=res.resource_type, resource_name=res.resource_name))
        except KafkaError as exc:
            out.append(m.AlterConfigsResourceResponse(error_code=exc.code, error_message=str(exc),
                                                      resource_type=res.resource_type, resource_name=res.resource_name))
    return m.AlterConfigsResponse(responses=tuple(out))
