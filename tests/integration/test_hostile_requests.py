"""Issue 26: requests that are well framed but ask for what the broker must refuse (R22) — a
Metadata v10/v11 topic without a name, a request with millions of entries, a record timestamp far
from now, a long group id — each gets Kafka's answer, and the broker's log stays short."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from oncelog.client import ProtocolClient
from oncelog.protocol import apis, messages
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration


def _metadata_v10_11(version: int, topics: list[tuple[str | None, uuid.UUID]]) -> object:
    m = messages.Builder(apis.METADATA, version, response=False)
    return m.MetadataRequest(
        topics=tuple(m.MetadataRequestTopic(name=n, topic_id=i) for n, i in topics),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False)


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_null_topic_name_is_refused_as_kafka_does(broker, version: int) -> None:
    """Row 3. Before: the null name reached the response encoder outside the handler boundary
    (TypeError, no answer, ~1.5 KB of asyncio traceback per request past the log limiter). Now:
    Kafka's answer (KafkaApis: InvalidRequestException, MetadataRequest.getErrorResponse): every
    named topic INVALID_REQUEST, the null name as ""; a topic id (served from v12) likewise."""
    some_id = uuid.uuid4()
    log_before = len(broker.log_tail(10**9))
    with ProtocolClient(broker.bootstrap) as c:
        for _ in range(200):  # bounded: a client repeating it must not fill the log
            resp = c.request(apis.METADATA, _metadata_v10_11(version, [("a-topic", uuid.UUID(int=0)), (None, uuid.UUID(int=0))]),
                             version=version)
            assert [(t.name, t.error_code) for t in resp.topics] == [
                ("a-topic", ErrorCode.invalid_request), ("", ErrorCode.invalid_request)]
        resp = c.request(apis.METADATA, _metadata_v10_11(version, [("by-id", some_id)]), version=version)
        assert [(t.name, t.error_code) for t in resp.topics] == [("by-id", ErrorCode.invalid_request)]
        # a well-formed v10/v11 request is still served (the check does not refuse names with a zero id)
        resp = c.request(apis.METADATA, _metadata_v10_11(version, [("fine-topic", uuid.UUID(int=0))]), version=version)
        assert [(t.name, t.error_code) for t in resp.topics] == [("fine-topic", ErrorCode.none)]
    time.sleep(0.3)
    log = broker.log_tail(10**9)[log_before:]
    assert "Traceback" not in log
    assert log.count("refused Metadata") <= 12, log[-3000:]  # the log limiter: a burst of 10 per window
    assert len(log) < 8000, log[-3000:]
