"""ApiVersions (18): the APIs and version ranges this broker speaks.

A client asking with a version newer than ours gets a v0 body with UNSUPPORTED_VERSION and our
list, so it can retry with a version we know (KIP-511); the dispatcher sends that one (``body``).
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import Request

API_KEY = apis.API_VERSIONS


def body(versions: dict[int, tuple[int, int]], version: int, error: ErrorCode) -> Any:
    """The answer listing ``versions`` (api key -> range), in ApiVersions ``version``."""
    m = Builder(API_KEY, version)
    keys = tuple(m.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(versions.items()))
    return m.ApiVersionsResponse(error_code=error, api_keys=keys)


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    return body(broker.advertised_versions(), request.api_version, ErrorCode.none)
