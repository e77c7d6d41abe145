"""The message browser's pure core: whole record batches in, the rows the page shows out
(docs/CONSOLE.md, "Messages"). No broker, no I/O: ``messages.py`` feeds it what
``broker/observability/partition_read.py`` read on the event loop.

Each batch's fate comes from the partition leader's transaction facts (``TxnFacts``), never
from a guess:

* not transactional: ``plain`` (a read_committed consumer sees it once it is below the LSO);
* transactional, inside an aborted transaction of its producer (an aborted-index entry with
  ``first_offset <= offset <= marker offset``): ``aborted``;
* transactional, at or after the first offset of its producer's open transaction: ``open``;
* otherwise transactional and ended by a COMMIT marker: ``committed``.

A control batch is a row of its own (``marker``: COMMIT or ABORT with the coordinator epoch).
A record is ``visible`` when a read_committed consumer gets it: below the LSO and ``plain`` or
``committed``; the read_committed view shows exactly those rows.

Bounds: a key, a value and each header value are shown up to ``KEY_SHOWN``/``VALUE_SHOWN``/
``HEADER_SHOWN`` bytes (the size says how long it is), at most ``HEADERS_SHOWN`` headers a
record; a batch is decompressed into at most ``DECODE_MAX`` bytes and checked against its CRC;
one that does not decode is an ``error`` row naming why, and the rest of the page goes on.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Iterator

from oncelog.broker.observability.partition_read import TxnFacts
from oncelog.protocol import records
from oncelog.protocol.errors import KafkaError

__all__ = ["Budget", "FATES", "Match", "batch_fate", "batch_rows", "headers_of", "shown"]

FATES = ("plain", "committed", "aborted", "open")
KEY_SHOWN = 1024
VALUE_SHOWN = 8192
HEADER_SHOWN = 1024
HEADERS_SHOWN = 32
#: a batch expanding beyond this is shown as an error row, not decoded
DECODE_MAX = 16 * 1024 * 1024


@dataclass
class Budget:
    """What one request may still decode: records and bytes of batches (each call to
    ``batch_rows`` spends its batch's)."""

    records: int
    nbytes: int

    @property
    def spent(self) -> bool:
        return self.records <= 0 or self.nbytes <= 0


@dataclass(frozen=True)
class Match:
    """A substring filter: ``needle`` (bytes) searched in the key, the value or both."""

    needle: bytes
    where: str = "both"  # key, value, both

    def __call__(self, key: bytes | None, value: bytes | None) -> bool:
        n = self.needle
        return bool((self.where != "value" and key is not None and n in key)
                    or (self.where != "key" and value is not None and n in value))


def shown(data: bytes | None, cap: int) -> dict[str, Any] | None:
    """A key, value or header value as the page gets it: its size, whether it is cut, how it
    reads (``json``: UTF-8 text that parses as a JSON object or array; ``text``: UTF-8 without
    control characters other than whitespace; ``binary``) and the first ``cap`` bytes in base64."""
    if data is None:
        return None
    part = data[:cap]
    cut = len(data) > cap
    fmt = "binary"
    try:
        text = part.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a multi-byte character cut at the end of the prefix is still text
        ends_cut = cut and exc.end == len(part) and len(part) - exc.start < 4
        text = part[:exc.start].decode("utf-8") if ends_cut else None
    if text is not None and all(c.isprintable() or c in "\t\r\n" for c in text):
        fmt = "text"
        if not cut and text[:1] in "{[":
            try:
                json.loads(text)
                fmt = "json"
            except ValueError:
                pass
    return {"size": len(data), "truncated": cut, "format": fmt, "b64": base64.b64encode(part).decode()}


def headers_of(headers: tuple[tuple[str, bytes | None], ...]) -> list[dict[str, Any]]:
    return [{"key": k[:256], "value": shown(v, HEADER_SHOWN)} for k, v in headers[:HEADERS_SHOWN]]


def batch_fate(h: records.BatchHeader, facts: TxnFacts, aborted_by_pid: dict[int, list[tuple[int, int]]]) -> str:
    """The fate of a data batch (see the module docstring)."""
    if not h.is_transactional:
        return "plain"
    for first, marker in aborted_by_pid.get(h.producer_id, ()):
        if first <= h.base_offset <= marker:
            return "aborted"
    first_open = facts.open.get(h.producer_id)
    if first_open is not None and h.base_offset >= first_open:
        return "open"
    return "committed"


def aborted_index(facts: TxnFacts) -> dict[int, list[tuple[int, int]]]:
    """The facts' aborted transactions by producer id: [(first offset, marker offset)]."""
    out: dict[int, list[tuple[int, int]]] = {}
    for a in facts.aborted:
        out.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
    return out


def _txn(facts: TxnFacts, pid: int) -> str | None:
    named = facts.transactional_ids.get(pid)
    return named[0] if named is not None else None


def batch_rows(batch: memoryview | bytes, h: records.BatchHeader, facts: TxnFacts,
               aborted_by_pid: dict[int, list[tuple[int, int]]], *, start: int, stop: int, lso: int,
               committed_view: bool, match: Match | None, budget: Budget) -> Iterator[dict[str, Any]]:
    """The rows of one batch whose offsets are in ``[start, stop)``: records (those a
    read_committed consumer sees, with ``committed_view``; those ``match`` accepts, when given)
    and, in the everything view without a filter, its control marker. Spends ``budget``."""
    budget.nbytes -= h.size
    if h.is_control:
        if committed_view or match is not None or not start <= h.base_offset < stop:
            return
        budget.records -= 1
        row: dict[str, Any] = {"kind": "marker", "offset": h.base_offset, "timestamp": h.max_timestamp,
                               "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                               "transactional_id": _txn(facts, h.producer_id), "visible": False}
        try:
            marker = records.read_control_marker(batch)
            row.update(marker="COMMIT" if marker.commit else "ABORT", coordinator_epoch=marker.coordinator_epoch)
        except KafkaError as exc:
            row.update(marker="UNKNOWN", error=str(exc))
        yield row
        return
    fate = batch_fate(h, facts, aborted_by_pid)
    if committed_view and fate not in ("plain", "committed"):
        return
    tid = _txn(facts, h.producer_id) if h.is_transactional else None
    try:
        recs = records.iter_records(batch, verify_crc=True, max_uncompressed=DECODE_MAX)
        for rec in recs:
            if rec.offset < start:
                continue
            if rec.offset >= stop:
                break
            budget.records -= 1
            visible = rec.offset < lso and fate in ("plain", "committed")
            if committed_view and not visible:
                continue
            if match is not None and not match(rec.key, rec.value):
                continue
            delta = rec.offset - h.base_offset
            yield {"kind": "record", "offset": rec.offset, "timestamp": rec.timestamp,
                   "timestamp_type": "log_append" if h.timestamp_type else "create",
                   "key": shown(rec.key, KEY_SHOWN), "value": shown(rec.value, VALUE_SHOWN),
                   "headers": headers_of(rec.headers), "producer_id": h.producer_id,
                   "producer_epoch": h.producer_epoch,
                   "sequence": h.base_sequence + delta if h.base_sequence >= 0 else None,
                   "transactional": h.is_transactional, "fate": fate, "transactional_id": tid,
                   "visible": visible, "batch": h.base_offset}
    except KafkaError as exc:  # a damaged or undecodable batch: say so, go on with the next
        budget.records -= 1
        yield {"kind": "error", "offset": max(h.base_offset, start), "batch": h.base_offset,
               "producer_id": h.producer_id, "fate": fate, "visible": False,
               "error": f"batch at offset {h.base_offset} does not decode: {exc}"}


def walk(data: bytes) -> list[tuple[int, records.BatchHeader]]:
    """(position, header) of each whole batch of ``data`` (stops at the first that is not one)."""
    return list(records.iter_batches(data))


@dataclass
class Scan:
    """What one request looked at: offsets ``[first, end)``, bytes of batches and records."""

    first: int = -1
    end: int = -1
    nbytes: int = 0
    records: int = 0
    hops: int = 0
    notes: list[str] = field(default_factory=list)
