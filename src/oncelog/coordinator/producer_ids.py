"""Producer id allocation: unique across the cluster and across restarts (R5).

As Kafka's producer-id blocks (seed 002): ids are handed out from a block of ``BLOCK_SIZE``
consecutive ids, and the end of the block is made durable *before* the first id of the block is
handed out. After a crash the next block starts past the last one persisted, so an id is never
reused; at most one block's worth of ids is skipped.

The block file is replaced atomically (write, fsync, rename, fsync the directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from oncelog.atomic import write_atomically

__all__ = ["BLOCK_SIZE", "FIRST_PRODUCER_ID", "ProducerIdManager", "ProducerIdSource"]

BLOCK_SIZE = 1000
FIRST_PRODUCER_ID = 1000


class ProducerIdSource(Protocol):
    """Where producer ids come from (the transaction coordinator's InitProducerId): this
    module's ``ProducerIdManager`` on the embedded broker, the store's sequence in cluster mode
    (``cluster/producer_ids.StoreProducerIds``)."""

    def next_producer_id(self) -> int:
        """An id never given before, by any broker of the cluster, across restarts (R5)."""
        ...


class ProducerIdManager:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._next = 0
        self._block_end = 0  # exclusive
        if self.path.exists():
            self._block_end = int(json.loads(self.path.read_text())["next_block_start"])
            self._next = self._block_end
        else:
            self._next = self._block_end = FIRST_PRODUCER_ID

    def next_producer_id(self) -> int:
        if self._next >= self._block_end:
            end = self._next + BLOCK_SIZE
            write_atomically(self.path, json.dumps({"version": 1, "next_block_start": end}).encode())
            self._block_end = end
        pid = self._next
        self._next += 1
        return pid
