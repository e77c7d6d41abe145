"""The broker-to-broker client (issue 15, broker/membership/peer_client.py): every failure to reach a peer
is a retriable KafkaError the caller retries, never an exception the dispatcher reports as a bug,
and a peer that stops answering fails the request at its deadline."""

from __future__ import annotations

import asyncio
import socket

import pytest

from oncelog.broker.membership.peer_client import PeerClients
from oncelog.protocol import apis
from oncelog.protocol.errors import KafkaError, RequestTimedOut
from oncelog.protocol.messages import Builder


def _body() -> object:
    m = Builder(apis.API_VERSIONS, 3, response=False)
    return m.ApiVersionsRequest(client_software_name="t", client_software_version="0")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_or_unknown_peer_is_a_retriable_error() -> None:
    async def go() -> None:
        port = _free_port()  # nothing listens there
        peers = PeerClients(1, lambda node: ("127.0.0.1", port) if node == 2 else None)
        for node in (2, 3):
            with pytest.raises(KafkaError) as err:
                await peers.request(node, apis.API_VERSIONS, 3, _body(), timeout_s=1)
            assert err.value.retriable
        peers.close()

    asyncio.run(go())


@pytest.mark.parametrize("behaviour", ["hang up", "never answer"])
def test_a_peer_that_hangs_up_or_never_answers_fails_the_request(behaviour: str) -> None:
    async def go() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if behaviour == "hang up":
                writer.close()
                return
            await reader.read(1 << 20)  # swallow the request, answer nothing
            await asyncio.sleep(5)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        peers = PeerClients(1, lambda node: ("127.0.0.1", port))
        with pytest.raises(KafkaError) as err:
            await peers.request(2, apis.API_VERSIONS, 3, _body(), timeout_s=0.5)
        assert err.value.retriable
        if behaviour == "never answer":
            assert isinstance(err.value, RequestTimedOut)
        peers.close()
        server.close()

    asyncio.run(go())
