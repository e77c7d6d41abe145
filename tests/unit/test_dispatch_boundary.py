"""Issue 26 row 3: the dispatcher's one boundary also covers encoding the answer."""

from __future__ import annotations

import asyncio

from oncelog.broker.context import Client
from oncelog.broker.network.dispatch import Dispatcher
from oncelog.protocol import apis, framing, messages
from oncelog.protocol.errors import ErrorCode


def test_an_answer_that_cannot_be_encoded_is_an_error_answer_not_a_dead_connection(caplog) -> None:
    """Row 3, the boundary. A handler's answer that its version cannot carry (a null where the
    schema has none) is a bug caught at the dispatcher's one boundary: logged on one fixed template
    (the log limiter holds it), answered UNKNOWN_SERVER_ERROR. Before: the TypeError escaped the
    dispatcher and killed the connection's task."""
    async def bad_handler(broker, request, client):
        m = messages.Builder(apis.METADATA, request.api_version)
        return m.MetadataResponse(brokers=(), cluster_id=None, controller_id=-1, topics=(
            m.MetadataResponseTopic(error_code=ErrorCode.none, name=None, partitions=()),))

    class Broker:
        pass

    d = Dispatcher(Broker(), {apis.METADATA: bad_handler})
    frame = framing.encode_request(apis.METADATA, 9, 7, "t", _v9_request())[4:]
    loop = asyncio.new_event_loop()
    try:
        parts = loop.run_until_complete(d.handle(frame, Client("test:1", loop.create_future())))
    finally:
        loop.close()
    corr, body = framing.decode_response(apis.METADATA, 9, b"".join(parts)[4:])
    assert corr == 7 and body.topics == ()
    assert [r for r in caplog.records if r.getMessage().startswith("bug: the metadata v9 answer")]


def _v9_request() -> object:
    c = apis.message_module_classes(apis.METADATA, 9, False)
    return c["MetadataRequest"](topics=(c["MetadataRequestTopic"](name="x"),), allow_auto_topic_creation=False,
                                include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
