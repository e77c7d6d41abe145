"""The last hour of traffic and lag, kept in the broker for the web console's charts (docs/CONSOLE.md).

What is kept. Every ``interval_s`` (``console.history.interval.ms``, 10 s by default) one sample:
per topic the produce rate (bytes/s and records/s, from the request-path counters of
``metrics.RequestStats``: whole batches, counted from their headers) and the fetch rate (bytes/s),
and per group its total lag (a classic or consumer group: log end - committed offset, summed over
the partitions this broker leads; a share group: log end - share-partition start offset). A rate
is the difference of two consecutive counter readings over their time apart; the first sample,
and one after a counter went backwards, has none (NaN).

Bounded in memory, whatever the broker holds: a ring of ``points = horizon_s / interval_s``
samples (at most ``MAX_POINTS``), one ``array('d')`` of that length per series (8 bytes a point),
and at most ``max_series`` series of each kind (``MAX_SERIES``); a series that appears while its
kind is full is not kept (``dropped`` counts them, the console says so), and one with no value
left in the whole ring is forgotten. So 4 kinds x 100 series x 360 points x 8 bytes = 1.2 MB
at most, with the default settings.

``History`` is pure (its callers give it the time and the readings) and not thread-safe: the
sampler (``sample``) feeds it on a worker thread and readers call ``series`` under ``lock``.
``sample`` runs on the event loop: it takes the same snapshot as ``/metrics`` and the console
(``observe.take``, chunked) and derives the readings off the loop.
"""

from __future__ import annotations

import asyncio
import math
import threading
from array import array
from typing import TYPE_CHECKING, Any, Iterable

from oncelog.broker.observability.observe import BrokerState, lag, take

if TYPE_CHECKING:
    from oncelog.broker.observability.observed import ObservedBroker
    from oncelog.broker.request_stats import RequestStats

__all__ = ["History", "KINDS", "MAX_POINTS", "MAX_SERIES", "group_lags", "sample"]

#: series kinds: topic produce bytes/s, topic produce records/s, topic fetch bytes/s, group lag
KINDS = ("produce_bytes", "produce_records", "fetch_bytes", "group_lag")
MAX_SERIES = 100
MAX_POINTS = 3600
NAN = math.nan


class History:
    """A ring of samples (see the module docstring). ``interval_s``: the time between samples;
    ``horizon_s``: how far back the ring reaches."""

    def __init__(self, interval_s: float, horizon_s: float = 3600.0, max_series: int = MAX_SERIES) -> None:
        self.interval_s = interval_s
        self.points = max(2, min(MAX_POINTS, int(horizon_s // interval_s)))
        self.max_series = max_series
        self.lock = threading.Lock()
        self._times = array("q", [0] * self.points)  # ms of each slot
        self._head = 0  # the next slot written
        self._count = 0  # slots holding a sample
        self._series: dict[tuple[str, str], array] = {}
        self._seen: dict[tuple[str, str], int] = {}  # series -> the sample number it last had a value in
        self._samples = 0
        self._per_kind = {k: 0 for k in KINDS}
        self.dropped = {k: 0 for k in KINDS}
        self.group_types: dict[str, str] = {}
        self._last: tuple[int, dict[str, tuple[int, int]], dict[str, int]] | None = None

    def baseline(self, now_ms: int) -> None:
        """The counters' zero: the broker started at ``now_ms`` with every counter at 0 (so
        the first sample has rates too)."""
        self._last = (now_ms, {}, {})

    def add(self, now_ms: int, topic_in: dict[str, tuple[int, int]] | None, topic_out: dict[str, int] | None,
            lags: dict[str, tuple[str, int]]) -> None:
        """One sample at ``now_ms``: the produce counters per topic (bytes, records), the fetch
        counters per topic (bytes), both cumulative (None: not counted), and each group's
        (type, lag)."""
        values: dict[tuple[str, str], float] = {}
        last = self._last
        if last is not None and topic_in is not None and topic_out is not None and now_ms > last[0]:
            dt = (now_ms - last[0]) / 1000
            for topic, (nbytes, nrecords) in topic_in.items():
                b0, r0 = last[1].get(topic, (0, 0))
                if nbytes >= b0 and nrecords >= r0:
                    values[("produce_bytes", topic)] = (nbytes - b0) / dt
                    values[("produce_records", topic)] = (nrecords - r0) / dt
            for topic, nbytes in topic_out.items():
                b0 = last[2].get(topic, 0)
                if nbytes >= b0:
                    values[("fetch_bytes", topic)] = (nbytes - b0) / dt
        if topic_in is not None and topic_out is not None:
            self._last = (now_ms, dict(topic_in), dict(topic_out))
        for gid, (gtype, n) in lags.items():
            values[("group_lag", gid)] = float(n)
            self.group_types[gid] = gtype
        slot = self._head
        self._times[slot] = now_ms
        for key, value in values.items():
            ring = self._series.get(key)
            if ring is None:
                if self._per_kind[key[0]] >= self.max_series:
                    self.dropped[key[0]] += 1
                    continue
                ring = self._series[key] = array("d", [NAN] * self.points)
                self._per_kind[key[0]] += 1
            ring[slot] = value
            self._seen[key] = self._samples
        for key, ring in list(self._series.items()):
            if key not in values:
                ring[slot] = NAN
                if self._samples - self._seen[key] >= self.points:  # nothing left of it in the ring
                    del self._series[key], self._seen[key]
                    self._per_kind[key[0]] -= 1
                    if key[0] == "group_lag":
                        self.group_types.pop(key[1], None)
        self._samples += 1
        self._head = (slot + 1) % self.points
        self._count = min(self._count + 1, self.points)

    def _order(self) -> list[int]:
        """Slot indexes, oldest first."""
        start = (self._head - self._count) % self.points
        return [(start + i) % self.points for i in range(self._count)]

    def series(self, kinds: Iterable[str] = KINDS, names: "set[str] | None" = None) -> dict[str, Any]:
        """The ring as plain JSON-able values: ``{"interval_s", "times_ms": [...], "series":
        {kind: {name: [value or None, ...]}}, "group_types", "dropped"}``, oldest first; only
        the series of ``kinds`` named in ``names`` (None: all)."""
        order = self._order()
        out: dict[str, dict[str, list[float | None]]] = {k: {} for k in kinds}
        for (kind, name), ring in sorted(self._series.items()):
            if kind not in out or (names is not None and name not in names):
                continue
            out[kind][name] = [None if math.isnan(ring[i]) else round(ring[i], 3) for i in order]
        return {"interval_s": self.interval_s, "times_ms": [self._times[i] for i in order], "series": out,
                "group_types": dict(self.group_types), "dropped": dict(self.dropped)}


def group_lags(snap: BrokerState) -> dict[str, tuple[str, int]]:
    """Each group's (type, total lag) in a snapshot (pure): committed offsets against the log
    end of the partitions this broker leads; share partitions from their start offset."""
    ends = {(r.topic, r.partition): r.log_end for r in snap.partitions}
    types = {g.group_id: g.group_type for g in snap.groups}
    out: dict[str, tuple[str, int]] = {g.group_id: (g.group_type, 0) for g in snap.groups}
    for gid, topic, p, committed in snap.committed:
        end = ends.get((topic, p))
        gtype, total = out.get(gid, (types.get(gid, "classic"), 0))
        out[gid] = (gtype, total + (lag(end, committed) if end is not None else 0))
    for sp in snap.share_partitions:
        end = ends.get((sp.topic, sp.partition))
        gtype, total = out.get(sp.group_id, ("share", 0))
        out[sp.group_id] = (gtype, total + (lag(end, sp.start_offset) if end is not None and sp.start_offset >= 0 else 0))
    return out


def _readings(history: History, snap: BrokerState, stats: "RequestStats | None") -> None:
    topic_in = {t: (c[0], c[1]) for t, c in stats.topic_in.items()} if stats is not None else None
    topic_out = dict(stats.topic_out) if stats is not None else None
    lags = group_lags(snap)
    with history.lock:
        history.add(snap.now_ms, topic_in, topic_out, lags)


async def sample(broker: "ObservedBroker", history: History, stats: "RequestStats | None") -> None:
    """Take one sample of ``broker`` into ``history``: the snapshot and a copy of the counters on
    the event loop (this coroutine runs there), the rest on a worker thread."""
    snap = await take(broker)
    counts = stats.copy() if stats is not None else None
    await asyncio.to_thread(_readings, history, snap, counts)
