"""Driver-side questions to the cluster: which partitions, which offsets.

Everything goes through confluent-kafka's ``AdminClient`` (Metadata and ListOffsets requests),
as any Kafka application would, so the source works against oncelog and any Kafka-compatible
cluster. ``latest`` offsets are asked for with the reader's isolation level: under
``read_committed`` the broker answers with the last stable offset (LSO), so a micro-batch never
ends inside an open transaction.

Calls are retried ``retries`` times ``retry_interval_ms`` apart (Spark's ``fetchOffset.*``
options) and then raise ``ClusterError``; a broker that restarts mid-stream costs a retry, not
the query. Every call is bounded (guard.py): Metadata runs through the AdminClient's guard,
ListOffsets answers are waited for with a timeout; after a failed attempt the AdminClient is
retired (closed on its guard's thread: it may be wedged) and the next attempt gets a new one.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable, Iterable, TypeVar

from oncelog.spark import offsets as off
from oncelog.spark.clientstate import ClientEvents, connection_conf, probe_cluster
from oncelog.spark.guard import Guarded, deadline_after, wait_future
from oncelog.spark.options import SourceOptions

log = logging.getLogger(__name__)

T = TypeVar("T")

REQUEST_TIMEOUT_S = 10.0


class ClusterError(RuntimeError):
    """The cluster did not answer a metadata or offsets question after all retries."""


class ClusterView:
    """Lazily created AdminClient plus the partition/offset questions the reader asks.

    Not thread-safe; one per driver-side reader. Holds no state besides the client, so it can be
    dropped and rebuilt at any time (``close`` does that)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: Guarded[Any] | None = None
        self._events = ClientEvents()

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def guarded(self) -> Guarded[Any]:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = Guarded("source admin client", AdminClient({
                **self.options.admin_config(), "error_cb": self._events.on_error}), state=self.state)
        return self._admin

    @property
    def admin(self):  # type: ignore[no-untyped-def]
        """The AdminClient, for requests answered with futures (wait with ``wait_future``)."""
        return self.guarded.raw

    def state(self) -> str:
        return f"{self._events.describe()}; {probe_cluster(connection_conf(self.options.admin_config()))}"

    def close(self) -> None:
        if self._admin is not None:
            self._admin.retire()
        self._admin = None

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        attempts = self.options.fetch_offset_retries + 1
        last: Exception | None = None
        for i in range(attempts):
            try:
                return fn()
            except Exception as exc:  # librdkafka raises KafkaException or returns errors in futures
                last = exc
                self.close()  # the next attempt gets a new client: this one may be wedged
                log.warning("oncelog source: %s failed (attempt %d of %d): %s", what, i + 1, attempts, exc)
                if i + 1 < attempts:
                    time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
        raise ClusterError(f"{what} failed after {attempts} attempts: {last}") from last

    # -- questions --------------------------------------------------------------------------

    def partitions(self) -> list[off.TopicPartition]:
        """The topic-partitions the options name, sorted. For ``assign`` they are taken as given
        (checked to exist); a subscribed topic that does not exist yet has no partitions."""
        o = self.options
        if o.assign:
            existing = set(self._retry("metadata", lambda: self._topic_partitions(sorted({t for t, _ in o.assign}))))
            missing = [tp for tp in o.assign if tp not in existing]
            if missing:
                raise ClusterError(f"assigned partitions do not exist: {missing}")
            return list(o.assign)
        if o.subscribe:
            return self._retry("metadata", lambda: self._topic_partitions(list(o.subscribe)))
        assert o.pattern is not None
        regex = re.compile(o.pattern)
        return self._retry("metadata", lambda: self._pattern_partitions(regex))

    def _topic_partitions(self, topics: list[str]) -> list[off.TopicPartition]:
        out: list[off.TopicPartition] = []
        for topic in topics:
            md = self.guarded.call(
                f"metadata of {topic}", lambda a: a.list_topics(topic=topic, timeout=REQUEST_TIMEOUT_S),
                deadline_after(REQUEST_TIMEOUT_S))
            t = md.topics.get(topic)
            if t is None or t.error is not None:
                # UNKNOWN_TOPIC_OR_PARTITION: not created yet; Spark's source waits for it too.
                continue
            out.extend((topic, p) for p in t.partitions)
        return sorted(out)

    def _pattern_partitions(self, regex: re.Pattern[str]) -> list[off.TopicPartition]:
        md = self.guarded.call(
            "metadata", lambda a: a.list_topics(timeout=REQUEST_TIMEOUT_S), deadline_after(REQUEST_TIMEOUT_S))
        out = [
            (name, p)
            for name, t in md.topics.items()
            if t.error is None and not name.startswith("__") and regex.fullmatch(name)
            for p in t.partitions
        ]
        return sorted(out)

    def earliest(self, tps: Iterable[off.TopicPartition]) -> off.PartitionOffsets:
        return self._list_offsets(list(tps), latest=False)

    def latest(self, tps: Iterable[off.TopicPartition]) -> off.PartitionOffsets:
        """Latest offsets: the LSO under read_committed, the high watermark otherwise."""
        return self._list_offsets(list(tps), latest=True)

    def _list_offsets(self, tps: list[off.TopicPartition], *, latest: bool) -> off.PartitionOffsets:
        if not tps:
            return {}

        def ask() -> off.PartitionOffsets:
            from confluent_kafka import IsolationLevel, TopicPartition
            from confluent_kafka.admin import OffsetSpec

            spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
            level = (
                IsolationLevel.READ_COMMITTED
                if self.options.isolation_level == "read_committed"
                else IsolationLevel.READ_UNCOMMITTED
            )
            futures = self.admin.list_offsets(
                {TopicPartition(t, p): spec for t, p in tps}, isolation_level=level, request_timeout=REQUEST_TIMEOUT_S
            )
            out: off.PartitionOffsets = {}
            for tp, fut in futures.items():
                res = wait_future(fut, what="ListOffsets", client=f"{tp.topic}-{tp.partition}",
                                  timeout_s=deadline_after(REQUEST_TIMEOUT_S), state=self.state)
                out[(tp.topic, tp.partition)] = int(res.offset)
            return out

        return self._retry("list offsets (" + ("latest" if latest else "earliest") + ")", ask)
