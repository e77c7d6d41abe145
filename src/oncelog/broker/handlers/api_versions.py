"""ApiVersions (18): the APIs and version ranges this broker speaks.

A client asking with a version newer than ours gets a v0 body with UNSUPPORTED_VERSION and our
list, so it can retry with a version we know (KIP-511); ``dispatch`` sends that one.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

API_KEY = apis.API_VERSIONS


def _body(version: int, error: ErrorCode) -> Any:
    from oncelog.broker.dispatch import advertised_versions

    m = Builder(API_KEY, version)
    keys = tuple(
        m.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(advertised_versions().items())
    )
    return m.ApiVersionsResponse(error_code=error, api_keys=keys)


def unsupported_version_response() -> Any:
    return _body(0, ErrorCode.unsupported_version)


async def handle(broker: Any, request: Any) -> Any:
    return _body(request.api_version, ErrorCode.none)
