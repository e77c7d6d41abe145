"""Shared by the transaction handlers: the error code a client of a given request version
understands for "this producer is fenced".

PRODUCER_FENCED (90) was added by KIP-588 together with new versions of the transactional APIs;
older versions only know INVALID_PRODUCER_EPOCH (47), which Kafka sends them instead.
"""

from __future__ import annotations

from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError

#: api key -> first version that understands PRODUCER_FENCED
_FENCED_SINCE = {
    apis.INIT_PRODUCER_ID: 4,
    apis.ADD_PARTITIONS_TO_TXN: 2,
    apis.ADD_OFFSETS_TO_TXN: 2,
    apis.END_TXN: 2,
    apis.TXN_OFFSET_COMMIT: 3,
}


def error_code(exc: KafkaError, api_key: int, version: int) -> ErrorCode:
    if exc.code == ErrorCode.producer_fenced and version < _FENCED_SINCE.get(api_key, 0):
        return ErrorCode.invalid_producer_epoch
    return exc.code
