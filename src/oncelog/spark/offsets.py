"""Offsets of the ``oncelog`` Spark source: pure functions, no Spark, no Kafka client.

A source offset is a JSON-able dict ``{topic: {partition-as-string: next-offset}}`` — the shape
of Spark's own Kafka source, so a checkpoint is readable by anyone who knows that one. Spark
compares offsets by their JSON text, so every offset this module builds has a *canonical* key
order: topics sorted, partitions sorted numerically. Two equal offsets always serialise to the
same string; otherwise Spark sees "new data" forever and loops on empty batches.

Invariants:
- every value in a canonical offset is a concrete offset >= 0 (the sentinels -2 = earliest and
  -1 = latest appear only in user options and are resolved before anything is checkpointed);
- ``rate_limit`` never moves a partition backwards and never past its latest offset.
"""

from __future__ import annotations

import json
import math
from typing import Iterable, Mapping

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
#: {(topic, partition): offset} — the working form; ``to_json_dict`` makes the checkpoint form.
PartitionOffsets = dict[TopicPartition, int]


def to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The canonical checkpoint form: topics sorted, partitions sorted as numbers."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json_dict(value: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """Inverse of ``to_json_dict`` (also accepts a user's ``startingOffsets`` JSON object).

    Raises ValueError on anything that is not ``{str: {int-like str: int}}``."""
    if not isinstance(value, Mapping):
        raise ValueError(f"offsets must be a JSON object of topics, got {value!r}")
    out: PartitionOffsets = {}
    for topic, parts in value.items():
        if not isinstance(parts, Mapping):
            raise ValueError(f"offsets of topic {topic!r} must be an object of partitions, got {parts!r}")
        for partition, offset in parts.items():
            try:
                p = int(partition)
            except (TypeError, ValueError):
                raise ValueError(f"topic {topic!r}: partition {partition!r} is not an integer") from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"topic {topic!r} partition {p}: offset {offset!r} is not an integer")
            out[(str(topic), p)] = offset
    return out


def dumps(offsets: Mapping[TopicPartition, int]) -> str:
    """The JSON text Spark will see for these offsets (for tests and logs)."""
    return json.dumps(to_json_dict(offsets))


def parse_offsets_option(text: str, *, name: str) -> str | PartitionOffsets:
    """Parse ``startingOffsets``/``endingOffsets``: 'earliest', 'latest' or Spark's JSON form
    (-2 earliest, -1 latest per partition). Raises ValueError naming the option."""
    t = text.strip()
    if t.lower() in ("earliest", "latest"):
        return t.lower()
    try:
        parsed = json.loads(t)
    except json.JSONDecodeError as exc:
        raise ValueError(f"option {name}: expected 'earliest', 'latest' or JSON, got {text!r} ({exc})") from None
    try:
        offsets = from_json_dict(parsed)
    except ValueError as exc:
        raise ValueError(f"option {name}: {exc}") from None
    for tp, off in offsets.items():
        if off < LATEST and off != EARLIEST:
            raise ValueError(f"option {name}: {tp[0]}-{tp[1]} has offset {off}; use >= 0, -1 (latest) or -2 (earliest)")
    return offsets


def parse_assign(text: str) -> list[TopicPartition]:
    """Parse the ``assign`` option: ``{"topicA": [0, 1], "topicB": [2]}``."""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"option assign: expected JSON like {{\"t\": [0, 1]}}, got {text!r} ({exc})") from None
    if not isinstance(parsed, dict) or not parsed:
        raise ValueError(f"option assign: expected a non-empty JSON object, got {text!r}")
    out: list[TopicPartition] = []
    for topic, parts in parsed.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise ValueError(f"option assign: partitions of {topic!r} must be a list of integers, got {parts!r}")
        out.extend((str(topic), p) for p in parts)
    return sorted(set(out))


def resolve(
    spec: str | PartitionOffsets,
    partitions: Iterable[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    default: str,
) -> PartitionOffsets:
    """Concrete offsets for ``partitions`` from a parsed offsets option.

    Partitions missing from a JSON spec get ``default`` ('earliest' or 'latest'), like Spark's
    source does for partitions it discovers. A JSON offset beyond the partition's latest offset
    is kept as given (the data may not exist yet); one below its earliest offset is kept too and
    reported by the reader as data loss."""
    out: PartitionOffsets = {}
    for tp in partitions:
        if isinstance(spec, str):
            choice: int = EARLIEST if spec == "earliest" else LATEST
        else:
            choice = spec.get(tp, EARLIEST if default == "earliest" else LATEST)
        if choice == EARLIEST:
            out[tp] = earliest[tp]
        elif choice == LATEST:
            out[tp] = latest[tp]
        else:
            out[tp] = choice
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_offsets: int) -> PartitionOffsets:
    """Admission control: the end offsets of a batch of at most ``max_offsets`` offsets.

    Offsets (not records: control records and aborted data count) are shared among partitions in
    proportion to each one's backlog, as Spark's Kafka source does: a partition's share is
    rounded down, except that a share below one offset is rounded up so no partition starves.
    Partitions with no backlog keep their start; partitions absent from ``start`` start at 0
    (callers put newly discovered partitions into ``start`` at their earliest offset first)."""
    if max_offsets <= 0:
        raise ValueError(f"maxOffsetsPerTrigger must be positive, got {max_offsets}")
    backlog = {tp: max(0, latest[tp] - start.get(tp, 0)) for tp in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return {tp: max(latest[tp], start.get(tp, 0)) for tp in latest}
    out: PartitionOffsets = {}
    for tp in latest:
        begin = start.get(tp, 0)
        size = backlog[tp]
        if size == 0:
            out[tp] = begin
            continue
        share = max_offsets * (size / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(begin + step, latest[tp])
    return out


def total_offsets(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    """Number of offsets between two source offsets (partitions absent from ``start`` from 0)."""
    return sum(max(0, end[tp] - start.get(tp, 0)) for tp in end)
