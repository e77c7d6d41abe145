"""What a cluster-mode broker owns for diskless topics (issue 29), opened with its other
cluster parts (broker/membership/cluster_parts.py) when ``diskless.storage.url`` is set: the object store
client, the byte cache shared by its fetches, the object writer (one object per interval for
every diskless partition it leads) and the collector's periodic task.

``engine_spec(...)`` describes the log of a diskless partition this broker is to lead, for
``storage.engines.open_engine`` (the leader tracker opens it on its opener thread). Every
broker of a cluster needs the same ``diskless.storage.*`` properties: a broker without them
cannot lead a diskless partition (it logs why and leaves the partition for the next view).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable

from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.leadership import Leadership
from oncelog.diskless import collector
from oncelog.diskless.cache import ByteCache
from oncelog.diskless.object_store import ObjectStore, ObjectStoreConfig
from oncelog.diskless.writer import ObjectWriter
from oncelog.storage.config import LogConfig
from oncelog.storage.engines import DisklessSpec

__all__ = ["DisklessParts", "store_config"]

_PROPS = ("diskless.storage.url", "diskless.storage.endpoint", "diskless.storage.region",
          "diskless.storage.request.timeout.ms", "diskless.storage.call.deadline.ms",
          "diskless.storage.retry.backoff.ms", "diskless.storage.retry.backoff.max.ms")


def store_config(config: Any) -> ObjectStoreConfig:
    """The ObjectStoreConfig of a BrokerConfig's ``diskless.storage.*`` properties (and the
    AWS_* environment). Raises InvalidConfig."""
    props = {}
    for name in _PROPS:
        value = config.kafka_value(name)
        if value is not None:
            props[name] = value
    return ObjectStoreConfig.from_properties(props)


@dataclass
class DisklessParts:
    store: ObjectStore
    cache: ByteCache
    writer: ObjectWriter
    gc_db: StoreConnection
    gc_task: "asyncio.Task | None" = None

    @classmethod
    def open(cls, config: Any, connect: Callable[[], Any]) -> "DisklessParts | None":
        """The parts, started on the running loop; None when ``diskless.storage.url`` is unset."""
        if not config.diskless_storage_url:
            return None
        store = ObjectStore(store_config(config))
        cache = ByteCache(store, config.diskless_read_cache_bytes)
        writer = ObjectWriter(store, connect, cache, broker_id=config.node_id,
                              interval_s=config.diskless_commit_interval_ms / 1000,
                              max_bytes=config.diskless_object_max_bytes,
                              buffer_max_bytes=config.diskless_buffer_max_bytes)
        loop = asyncio.get_running_loop()
        writer.start(loop)
        gc_db = StoreConnection(connect, f"node {config.node_id} diskless collector")
        task = loop.create_task(collector.every(config.diskless_gc_interval_ms / 1000, store, gc_db,
                                                config.diskless_gc_grace_ms, lambda: int(time.time() * 1000)))
        return cls(store, cache, writer, gc_db, task)

    def counters(self) -> dict[str, float]:
        """The parts' counters since the broker started, as plain ints (on the event loop; for
        ``observe.take`` and so the metrics): object-store requests by kind
        (``requests_PUT``, ``requests_GET``, ...: every attempt, as a cloud store bills them),
        bytes PUT and GET, retries; byte-cache hits, misses and the bytes it holds; the
        writer's objects, commits and batches, and where its batches' time went (``phase_room``,
        ``phase_close``, ...: seconds summed over ``timed_batches``, writer.PHASES; floats);
        the damaged batches reads found, by kind
        (``damaged_missing``, ``damaged_truncated``, ``damaged_corrupt``)."""
        out = {f"requests_{kind}": n for kind, n in self.store.requests.items()}
        out.update(put_bytes=self.store.put_bytes, get_bytes=self.store.get_bytes, retries=self.store.retries,
                   cache_hits=self.cache.hits, cache_misses=self.cache.misses, cache_bytes=self.cache.size,
                   objects=self.writer.stats.objects, object_bytes=self.writer.stats.object_bytes,
                   commits=self.writer.stats.commits, batches=self.writer.stats.batches,
                   timed_batches=self.writer.stats.timed)
        out.update({f"phase_{name}": seconds for name, seconds in self.writer.stats.phase_s.items()})
        out.update({f"damaged_{kind}": n for kind, n in self.cache.damaged.items()})
        return out

    def engine_spec(self, reader: StoreConnection, lead: Leadership, config: LogConfig) -> DisklessSpec:
        """The spec of a diskless partition's log led under ``lead``, read with ``reader``,
        written through this broker's object writer and read through its cache."""
        return DisklessSpec(reader, self.writer, self.cache, lead, config)

    def close(self) -> None:
        if self.gc_task is not None:
            self.gc_task.cancel()
        self.writer.close_now()
        self.gc_db.close()
