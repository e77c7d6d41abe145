"""The source's readers: streaming (micro-batch) and batch, both planning one input partition
per topic-partition range and reading it with ``fetch.read_range`` on an executor.

Streaming contract, as PySpark calls it (driver side, one long-lived Python process):

- ``initialOffset()`` — startingOffsets resolved to concrete offsets (checkpointed as batch 0's
  start; a restarted query never calls it again: it resumes from its checkpoint).
- ``latestOffset(start, limit)`` — the end of the next batch: the latest offsets (LSO under
  read_committed), capped by ``maxOffsetsPerTrigger`` (``ReadMaxRows``) and, under
  Trigger.AvailableNow, by the target fixed in ``prepareForTriggerAvailableNow``. Returns
  ``start`` unchanged — the same JSON text — when there is nothing new, so Spark runs no batch.
  Partitions that appear later are read from their earliest offset; a partition that vanished
  is data loss.
- ``partitions(start, end)`` — one ``KafkaRange`` per partition with ``end > start``, in sorted
  order, so re-planning a batch after a restart yields the same task numbering.
- ``commit(end)`` — Spark finished every batch up to ``end``: with ``groupIdForLag`` the offsets
  are committed to that consumer group (best effort, for lag monitoring only; Spark's checkpoint
  stays the source of truth).

Offsets are canonical JSON dicts (see ``offsets``).
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, Sequence

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from oncelog.spark import fetch
from oncelog.spark import offsets as off
from oncelog.spark.cluster import ClusterError, ClusterView
from oncelog.spark.guard import wait_future
from oncelog.spark.options import SourceOptions

log = logging.getLogger(__name__)


class KafkaRange(InputPartition):
    """Offsets ``[start, end)`` of one topic-partition: the unit of work of one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def plan_ranges(start: off.PartitionOffsets, end: off.PartitionOffsets) -> list[KafkaRange]:
    """One range per partition with data between ``start`` and ``end``, sorted."""
    out = []
    for tp in sorted(end):
        s = start.get(tp)
        if s is None:
            raise ValueError(f"no start offset for {tp[0]}-{tp[1]}")
        if end[tp] > s:
            out.append(KafkaRange(tp[0], tp[1], s, end[tp]))
    return out


class _Reading:
    """What both readers share: options, lazy cluster view, executor-side ``read``."""

    options: SourceOptions

    def __getstate__(self) -> dict[str, Any]:
        # Readers are pickled to executors; client handles stay behind.
        state = dict(self.__dict__)
        state["_cluster"] = None
        return state

    @property
    def cluster(self) -> ClusterView:
        if getattr(self, "_cluster", None) is None:
            self._cluster = ClusterView(self.options)
        return self._cluster

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRange), partition
        return fetch.read_range(self.options, partition.topic, partition.partition, partition.start, partition.end)

    def _data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise fetch.DataLossError(message + " (set failOnDataLoss=false to go on)")
        log.warning("oncelog source: data loss: %s; going on (failOnDataLoss=false)", message)


class OncelogStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: ClusterView | None = None
        self._target: off.PartitionOffsets | None = None
        self._lag_committed: off.PartitionOffsets | None = None

    # -- offsets ---------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        tps = self.cluster.partitions()
        offsets = off.resolve(
            self.options.starting, tps, self.cluster.earliest(tps), self.cluster.latest(tps), default="earliest"
        )
        return off.to_json_dict(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.cluster.partitions()
        self._target = self.cluster.latest(tps)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = off.from_json_dict(start)
        self._commit_for_lag(begin)
        tps = self.cluster.partitions()
        current = set(tps)
        for tp in sorted(set(begin) - current):
            self._data_loss(f"partition {tp[0]}-{tp[1]} disappeared (topic deleted or partitions removed)")
            del begin[tp]
        new = [tp for tp in tps if tp not in begin]
        if new:
            begin.update(self.cluster.earliest(new))
        latest = self.cluster.latest(tps)
        if self._target is not None:
            # AvailableNow: nothing beyond what existed when the query started; partitions
            # created since are not read in this run.
            latest = {tp: min(latest[tp], self._target.get(tp, begin[tp])) for tp in latest}
        for tp in tps:
            if latest[tp] < begin[tp]:
                self._data_loss(
                    f"{tp[0]}-{tp[1]}: latest offset {latest[tp]} is below the position {begin[tp]} "
                    "(the partition was truncated or recreated)"
                )
                latest[tp] = begin[tp]
        if isinstance(limit, ReadMaxRows):
            end = off.rate_limit(begin, latest, limit.max_rows)
        else:
            end = {tp: max(latest[tp], begin[tp]) for tp in latest}
        return off.to_json_dict(end)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = off.from_json_dict(start)
        stop = off.from_json_dict(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(self.cluster.earliest(new))
        return plan_ranges(begin, stop)

    # -- progress --------------------------------------------------------------------------

    def commit(self, end: dict) -> None:
        self._commit_for_lag(off.from_json_dict(end))

    def _commit_for_lag(self, processed: off.PartitionOffsets) -> None:
        """Commit ``processed`` to ``groupIdForLag``. ``latestOffset(start)`` calls this too:
        Spark asks for the next batch only once the batch ending at ``start`` is committed in its
        commit log, and ``commit(end)`` runs one batch late (not at all after the last batch of
        an AvailableNow run). Failures are logged, never raised: lag monitoring must not stop
        the pipeline."""
        group = self.options.group_for_lag
        if not group or not processed or processed == self._lag_committed:
            return
        try:
            from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

            req = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(processed.items())])
            futures = self.cluster.admin.alter_consumer_group_offsets([req], request_timeout=10)
            for fut in futures.values():
                wait_future(fut, what="AlterConsumerGroupOffsets", client=f"group {group}", timeout_s=15)
            self._lag_committed = dict(processed)
        except Exception as exc:
            self.cluster.close()  # it may be wedged: the next question gets a new client
            log.warning("oncelog source: committing progress to group %r failed: %s", group, exc)

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


class OncelogBatchReader(_Reading, DataSourceReader):
    """Batch read of ``[startingOffsets, endingOffsets)`` (earliest and latest by default)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: ClusterView | None = None

    def partitions(self) -> Sequence[InputPartition]:
        tps = self.cluster.partitions()
        if not tps:
            return []
        earliest = self.cluster.earliest(tps)
        latest = self.cluster.latest(tps)
        start = off.resolve(self.options.starting, tps, earliest, latest, default="earliest")
        end = off.resolve(self.options.ending, tps, earliest, latest, default="latest")
        for tp in tps:
            if start[tp] > end[tp]:
                raise ValueError(f"{tp[0]}-{tp[1]}: startingOffsets {start[tp]} is after endingOffsets {end[tp]}")
        return plan_ranges(start, end)


__all__ = ["ClusterError", "KafkaRange", "OncelogBatchReader", "OncelogStreamReader", "plan_ranges"]
