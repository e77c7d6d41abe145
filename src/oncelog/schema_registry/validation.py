"""Schema validation on produce: the topic configs ``confluent.key.schema.validation`` and
``confluent.value.schema.validation`` (Confluent Server's names).

A partition of such a topic takes a batch only when every key (value) is null or starts with
the Confluent wire format's prefix (magic byte 0, 4-byte big-endian schema id) naming an id
registered (live, not soft-deleted) under ``<topic>-key`` (``<topic>-value``): the subject
TopicNameStrategy gives. Anything else is INVALID_RECORD with a ``record_errors`` entry naming
the first record of each id at fault (Produce v8+), and nothing of the batch is written.

Cost. The ids are collected by the record walk every produced batch already gets (C,
protocol/_recordwalk.c: the distinct ids of the batch, no object per record); the allowed ids
of a subject are one frozenset the store's reader replaces whole (state.live_ids), read without
a lock. A batch whose ids are all known costs a set lookup per distinct id.

Freshness. This broker's registry state may be a moment behind one that registered a schema
on another broker (its reader polls the topic). A batch refused only for an unknown id makes
this broker read ``_schemas`` to its end once (at most one such read per ``CATCH_UP_EVERY_S``)
and check again before answering. Until the state is first loaded, produce to such a topic
waits (at most ``LOAD_WAIT_S``), then is refused with NOT_ENOUGH_REPLICAS (retriable).

The store is the registry's when this broker serves it (``schema.registry.listen``); else a
reader of ``_schemas`` is started here at the first batch that needs one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from oncelog.protocol import records
from oncelog.protocol.errors import NotEnoughReplicas
from oncelog.schema_registry.store import SchemaStore
from oncelog.storage.config import LogConfig

log = logging.getLogger(__name__)

LOAD_WAIT_S = 10.0
CATCH_UP_EVERY_S = 0.2
CATCH_UP_S = 2.0


class SchemaIds:
    """The produce path's view of the registry. ``store``: returns the store (made and started
    on first call)."""

    def __init__(self, store: Callable[[], SchemaStore]) -> None:
        self._store_of = store
        self._store: SchemaStore | None = None
        self._last_catch_up = float("-inf")

    def store(self) -> SchemaStore:
        if self._store is None:
            self._store = self._store_of()
        return self._store

    def rule(self, topic: str, config: LogConfig, store: SchemaStore) -> records.SchemaIdRule:
        live = store.state.live_ids
        key_subject, value_subject = f"{topic}-key", f"{topic}-value"
        return records.SchemaIdRule(live.get(key_subject, frozenset()) if config.key_schema_validation else None,
                                    live.get(value_subject, frozenset()) if config.value_schema_validation else None,
                                    key_subject, value_subject)

    async def validate(self, topic: str, batch: bytes | bytearray | memoryview, config: LogConfig,
                       timestamps: records.TimestampRule) -> records.BatchHeader:
        """``records.validate_produce_batch`` of the batch with the topic's schema-id rule.
        Raises what it raises (SchemaIdErrors among them), or NotEnoughReplicas while the
        registry state is not loaded."""
        store = self.store()
        if not store.ready.is_set():
            await asyncio.to_thread(store.ready.wait, LOAD_WAIT_S)
            if not store.ready.is_set():
                raise NotEnoughReplicas(f"the schema registry's state ({store.topic}) is not loaded yet; "
                                        f"{topic} validates schema ids")

        def check() -> records.BatchHeader:
            return records.validate_produce_batch(batch, config.max_message_bytes, config.max_uncompressed_bytes,
                                                  compacted="compact" in config.cleanup_policy, timestamps=timestamps,
                                                  schema_ids=self.rule(topic, config, store))
        try:
            return check()
        except records.SchemaIdErrors as exc:
            now = time.monotonic()
            if not exc.unknown or now - self._last_catch_up < CATCH_UP_EVERY_S:
                raise
            self._last_catch_up = now
            try:
                await asyncio.to_thread(store.catch_up, CATCH_UP_S)
            except Exception as caught:  # noqa: BLE001 - the refusal stands
                log.debug("schema validation: reading %s to its end failed: %s", store.topic, caught)
                raise exc from None
            return check()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
