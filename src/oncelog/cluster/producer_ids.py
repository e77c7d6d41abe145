"""Producer ids in cluster mode: blocks handed out by the store, so no two brokers ever give the
same id (R5 across brokers).

As ``coordinator/producer_ids.ProducerIdManager`` (same interface, ``next_producer_id``), ids
come in blocks of ``BLOCK_SIZE``; a block is taken from the sequence
``oncelog_producer_id_block_seq`` (schema.py), which PostgreSQL never hands out twice, even
across crashes (a taken block's unused ids are skipped). Blocks start past
``FIRST_PRODUCER_ID``. Not thread-safe: one per broker, called from its event loop (one short
query per block).
"""

from __future__ import annotations

from oncelog.cluster.connection import StoreConnection

__all__ = ["BLOCK_SIZE", "StoreProducerIds"]

BLOCK_SIZE = 1000
FIRST_PRODUCER_ID = 1000


class StoreProducerIds:
    def __init__(self, store: StoreConnection) -> None:
        self._store = store
        self._next = 0
        self._end = 0  # exclusive

    def next_producer_id(self) -> int:
        """A producer id no broker has given before. Raises StoreUnavailable (retriable)."""
        if self._next >= self._end:
            (block,), = self._store.query("SELECT nextval('oncelog_producer_id_block_seq')")
            self._next = FIRST_PRODUCER_ID + (block - 1) * BLOCK_SIZE
            self._end = self._next + BLOCK_SIZE
        pid = self._next
        self._next += 1
        return pid
