"""The message browser's pages (docs/CONSOLE.md, "Messages"): where a page starts, how far it
reads, and what it says about the partition, over a ``PartitionReader`` (the broker's own read
API on the event loop: broker/observability/partition_read.py; tests pass a fake).

A query names a topic, a partition, a view (``read_committed``: what a read_committed consumer
sees; ``everything``: every record with its fate, and the markers) and where to start:

* ``offset=O``: forwards from O; ``from=beginning``: from the log start;
* ``ts=MS``: forwards from the first record at or after that time (ListOffsets' answer);
* ``from=newest`` or ``before=O``: the page that ends just before the upper end (the LSO for
  read_committed, the high watermark for everything) or before O: backwards.

Each page is at most ``limit`` rows (``MAX_LIMIT``), and reads in hops of ``HOP_BYTES`` until it
has them, reaches the upper end, or spends its budget: ``SCAN_BYTES`` bytes of batches and
``SCAN_RECORDS`` records decoded. A filter that matches rarely therefore answers with fewer rows
and where it stopped (``next_offset``), never with unbounded work; the page offers to go on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs

from oncelog.broker.observability.partition_read import TxnFacts, Window
from oncelog.console.browse import Budget, Match, Scan, aborted_index, batch_rows, walk

__all__ = ["PartitionReader", "Query", "QueryError", "page", "parse_query"]

MAX_LIMIT = 200
DEFAULT_LIMIT = 50
HOP_BYTES = 1 << 20
SCAN_BYTES = 8 << 20
SCAN_RECORDS = 50_000
MAX_FILTER = 256
VIEWS = ("read_committed", "everything")


class QueryError(ValueError):
    """A query the browser refuses (HTTP 400), saying why."""


class PartitionReader(Protocol):
    """One partition, as the broker reads it (each call is one turn of the event loop)."""

    def window(self, offset: int, max_bytes: int, read_committed: bool) -> Window: ...

    def facts(self, first: int, last: int, producer_ids: frozenset[int]) -> TxnFacts: ...

    def offset_for_timestamp(self, ts_ms: int) -> int: ...


@dataclass(frozen=True)
class Query:
    topic: str
    partition: int
    view: str = "read_committed"
    offset: int | None = None
    before: int | None = None
    ts: int | None = None
    start: str | None = None  # beginning, newest
    limit: int = DEFAULT_LIMIT
    match: Match | None = None


def _int(qs: dict[str, list[str]], name: str, lo: int = 0, hi: int = 2**63 - 1) -> int | None:
    values = qs.get(name)
    if not values:
        return None
    v = values[-1]
    if not v.lstrip("-").isdigit() or not lo <= int(v) <= hi:
        raise QueryError(f"{name}: expected an integer from {lo} to {hi}")
    return int(v)


def parse_query(text: str) -> Query:
    """A query string (``topic=T&partition=P&isolation=read_committed&offset=O&limit=N&q=…``).
    Raises QueryError."""
    try:
        qs = parse_qs(text, keep_blank_values=False, max_num_fields=32)
    except ValueError:
        raise QueryError("at most 32 query fields") from None
    topic = (qs.get("topic") or [""])[-1]
    if not 0 < len(topic) <= 249:
        raise QueryError("topic: expected a topic name")
    partition = _int(qs, "partition", 0, 2**31 - 1)
    if partition is None:
        raise QueryError("partition: expected a partition number")
    view = (qs.get("isolation") or ["read_committed"])[-1]
    if view not in VIEWS:
        raise QueryError(f"isolation: expected one of {', '.join(VIEWS)}")
    start = (qs.get("from") or [None])[-1]
    if start not in (None, "beginning", "newest"):
        raise QueryError("from: expected beginning or newest")
    q = (qs.get("q") or [""])[-1].encode()
    if len(q) > MAX_FILTER:
        raise QueryError(f"q: at most {MAX_FILTER} bytes")
    where = (qs.get("in") or ["both"])[-1]
    if where not in ("key", "value", "both"):
        raise QueryError("in: expected key, value or both")
    limit = _int(qs, "limit", 1, MAX_LIMIT) or DEFAULT_LIMIT
    return Query(topic, partition, view, _int(qs, "offset"), _int(qs, "before"), _int(qs, "ts", -1),
                 start, limit, Match(q, where) if q else None)


def _scan(reader: PartitionReader, q: Query, start: int, stop: int | None, want: int | None,
          budget: Budget, scan: Scan) -> tuple[list[dict[str, Any]], int, Window | None]:
    """Rows from ``start`` forwards, up to ``stop`` (None: the upper end), until ``want`` rows
    (None: all) or the budget is spent. Returns (rows, the offset after the last one looked at,
    the first window read)."""
    committed = q.view == "read_committed"
    rows: list[dict[str, Any]] = []
    pos = start
    first: Window | None = None
    while not budget.spent:
        w = reader.window(pos, HOP_BYTES, committed)
        scan.hops += 1
        if first is None:
            first = w
        pos = max(pos, w.offset)
        end = w.upper if stop is None else min(stop, w.upper)
        if pos >= end:
            break
        batches = walk(w.data)
        if not batches:  # nothing readable yet (a diskless read cache still loading)
            scan.notes.append(f"no batch could be read at offset {pos} yet")
            break
        last = batches[-1][1]
        facts = reader.facts(batches[0][1].base_offset, last.last_offset,
                             frozenset(h.producer_id for _, h in batches if h.producer_id >= 0))
        aborted = aborted_index(facts)
        mv = memoryview(w.data)
        if scan.first < 0:
            scan.first = pos
        for at, h in batches:
            if h.last_offset < pos:
                continue
            if h.base_offset >= end or budget.spent:
                break
            scan.nbytes += h.size
            for row in batch_rows(mv[at:at + h.size], h, facts, aborted, start=pos, stop=end, lso=w.lso,
                                  committed_view=committed, match=q.match, budget=budget):
                rows.append(row)
                if want is not None and len(rows) >= want:
                    scan.end = row["offset"] + 1
                    return rows, row["offset"] + 1, first
            pos = h.next_offset
        scan.end = pos
        if pos >= end:
            break
    return rows, pos, first


def page(reader: PartitionReader, q: Query) -> dict[str, Any]:
    """One page of the browser (see the module docstring) as the JSON document the page shows."""
    budget = Budget(SCAN_RECORDS, SCAN_BYTES)
    scan = Scan()
    committed = q.view == "read_committed"
    backwards = q.before is not None or (q.start == "newest" and q.offset is None)
    if backwards:
        bounds = reader.window(2**63 - 1, 0, committed)  # at the upper end: no data, the offsets
        upper = bounds.upper if q.before is None else min(q.before, bounds.upper)
        rows: list[dict[str, Any]] = []
        lo, step, nxt = upper, q.limit, upper
        while len(rows) < q.limit and lo > bounds.log_start and not budget.spent:
            from_ = max(bounds.log_start, lo - step)
            got, reached, _w = _scan(reader, q, from_, lo, None, budget, scan)
            if reached < lo:  # the budget ran out inside this window: its rows would leave a gap
                if not rows:
                    rows, lo, nxt = got, from_, reached
                break
            rows = got + rows
            lo, step = from_, step * 2
        more_before = len(rows) > q.limit or lo > bounds.log_start
        rows = rows[-q.limit:]
        start = rows[0]["offset"] if rows else lo
        w = bounds
    else:
        if q.ts is not None:
            start = reader.offset_for_timestamp(q.ts)
        elif q.offset is not None and q.start != "beginning":
            start = q.offset
        else:
            start = 0
        rows, nxt, first = _scan(reader, q, start, None, q.limit, budget, scan)
        w = first if first is not None else reader.window(start, 0, committed)
        start = max(start, w.log_start)
        more_before = start > w.log_start
    upper = w.upper
    return {
        "topic": q.topic, "partition": q.partition, "isolation": q.view, "limit": q.limit,
        "filter": None if q.match is None else {"q": q.match.needle.decode("utf-8", "replace"), "in": q.match.where},
        "log_start": w.log_start, "lso": w.lso, "high_watermark": w.high_watermark, "upper": upper,
        "rows": rows, "start_offset": start, "next_offset": nxt, "more_after": nxt < upper,
        "more_before": more_before,
        "scanned": {"from": scan.first, "to": scan.end, "bytes": scan.nbytes, "hops": scan.hops,
                    "budget_spent": budget.spent},
    }
