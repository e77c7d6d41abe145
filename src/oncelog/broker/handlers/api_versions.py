"""ApiVersions (18): the APIs and version ranges this broker speaks.

A client asking with a version newer than ours gets a v0 body with UNSUPPORTED_VERSION and our
list, so it can retry with a version we know (KIP-511); the dispatcher sends that one (``body``).

v3 also carries the features (``protocol.apis.FEATURES``): ``transaction.version`` finalized at 2
(transactions version 2, KIP-890 part 2), the level at which Kafka 4's Java producer switches to
EndTxn v5 and Produce v12 with the broker-side add of partitions.
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
    if version < 3 or error != ErrorCode.none:
        return m.ApiVersionsResponse(error_code=error, api_keys=keys)
    # As Kafka 4: a supported feature whose minimum is 0 is left out below v4 (older parsers
    # refuse a 0 minimum, KAFKA-17492); the finalized level is sent at every v3+ version.
    supported = tuple(m.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                      for n, (lo, hi, _) in sorted(apis.FEATURES.items()) if version >= 4 or lo > 0)
    finalized = tuple(m.FinalizedFeatureKey(name=n, max_version_level=level, min_version_level=level)
                      for n, (_, _, level) in sorted(apis.FEATURES.items()))
    return m.ApiVersionsResponse(error_code=error, api_keys=keys, supported_features=supported,
                                 finalized_features_epoch=apis.FINALIZED_FEATURES_EPOCH, finalized_features=finalized)


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    return body(broker.advertised_versions(), request.api_version, ErrorCode.none)
