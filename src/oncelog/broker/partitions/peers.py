"""What the partitions' broker-to-broker requests (markers.py's WriteTxnMarkers, txn_verifier.py's
AddPartitionsToTxn verification) need of the broker's peer clients: one request to another
broker. ``membership/peer_client.PeerClients`` provides it; the partitions part names this
Protocol instead of importing the membership part (broker/'s arrows)."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["PeerRequests"]


class PeerRequests(Protocol):
    async def request(self, node: int, api_key: int, version: int, body: Any, *, timeout_s: float = 5.0) -> Any:
        """Send ``body`` (a kio request message) as ``api_key`` ``version`` to broker ``node``
        and return the decoded response body. Raises NotLeaderOrFollower when ``node`` is not
        a live broker, RequestTimedOut and other retriable KafkaErrors when it cannot answer."""
        ...
