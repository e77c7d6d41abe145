"""Checks a queue-workload history (history.py) for the anomalies exactly-once must rule out.

Each check is a small function over the whole history returning ``Anomaly`` rows; ``check``
runs them all. The kinds:

* ``lost``: a send of a committed transaction that the final read does not contain.
* ``duplicate``: one value read at two different offsets (or twice in the final read).
* ``aborted-read``: a value written by an aborted transaction observed by a read_committed read.
* ``uncommitted-read``: a value observed by a read that completed before the writing transaction
  began to commit (it cannot have been committed when it was read), or a value no op wrote.
* ``inconsistent-offset``: two different values observed at one (topic, partition, offset).
* ``nonmonotonic-poll``: a consumer's offsets on a partition going backwards without a seek.
* ``nonmonotonic-send``: one client's acknowledged sends to a partition with offsets that go
  backwards over time (its own writes reordered).
* ``unseen``: a consumer that read past the offset of a committed record on a partition without
  returning it (it skipped committed data).

A history without a final read skips the ``lost`` check (and says so in ``notes``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from oncelog_tools.verify.history import Op

KINDS = (
    "lost",
    "duplicate",
    "aborted-read",
    "uncommitted-read",
    "inconsistent-offset",
    "nonmonotonic-poll",
    "nonmonotonic-send",
    "unseen",
)


@dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str


@dataclass
class Report:
    anomalies: list[Anomaly] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def by_kind(self) -> dict[str, int]:
        out = {k: 0 for k in KINDS}
        for a in self.anomalies:
            out[a.kind] += 1
        return out


def check(history: list[Op]) -> Report:
    report = Report()
    writer: dict[str, Op] = {}
    for op in history:
        for _t, _p, value, _o in op.sends:
            writer[value] = op
    reads = [op for op in history if not op.final_read]
    finals = [op for op in history if op.final_read]
    report.counts = {
        "ops": len(history),
        "committed": sum(op.outcome == "committed" for op in history if op.sends),
        "aborted": sum(op.outcome == "aborted" for op in history if op.sends),
        "unknown": sum(op.outcome == "unknown" for op in history if op.sends),
        "sends": sum(len(op.sends) for op in history),
        "polled": sum(len(op.polls) for op in reads),
    }
    report.anomalies += _inconsistent_offsets(history)
    report.anomalies += _duplicates(history)
    report.anomalies += _aborted_or_uncommitted_reads(history, writer)
    report.anomalies += _nonmonotonic_polls(reads)
    report.anomalies += _nonmonotonic_sends(history)
    report.anomalies += _unseen(reads, history)
    if finals:
        report.anomalies += _lost(history, finals)
    else:
        report.notes.append("no final read in the history: lost writes not checked")
    return report


def _inconsistent_offsets(history: list[Op]) -> list[Anomaly]:
    at: dict[tuple[str, int, int], str] = {}
    out = []
    seen_pairs = set()
    for op in history:
        observed = [(t, p, o, v) for t, p, o, v in op.polls] + [(t, p, o, v) for t, p, v, o in op.sends if o is not None]
        for t, p, o, v in observed:
            prev = at.setdefault((t, p, o), v)
            if prev != v and (t, p, o) not in seen_pairs:
                seen_pairs.add((t, p, o))
                out.append(Anomaly("inconsistent-offset", f"{t}-{p}@{o}: {prev!r} and {v!r}"))
    return out


def _duplicates(history: list[Op]) -> list[Anomaly]:
    offsets: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    out = []
    for op in history:
        for t, p, o, v in op.polls:
            offsets[v].add((t, p, o))
        if op.final_read:
            counts: dict[str, int] = defaultdict(int)
            for _t, _p, _o, v in op.polls:
                counts[v] += 1
            out += [Anomaly("duplicate", f"{v!r} read {n} times by the final read") for v, n in counts.items() if n > 1]
    out += [Anomaly("duplicate", f"{v!r} at {sorted(locs)}") for v, locs in offsets.items() if len(locs) > 1]
    return out


def _aborted_or_uncommitted_reads(history: list[Op], writer: dict[str, Op]) -> list[Anomaly]:
    out = []
    for op in history:
        for t, p, o, v in op.polls:
            w = writer.get(v)
            if w is None:
                out.append(Anomaly("uncommitted-read", f"{v!r} at {t}-{p}@{o} was written by no operation"))
            elif w.outcome == "aborted":
                out.append(Anomaly("aborted-read", f"{v!r} at {t}-{p}@{o} by {op.client}, written by aborted {w.client}"))
            elif op.complete < w.invoke:
                out.append(Anomaly("uncommitted-read", f"{v!r} read by {op.client} before its transaction began"))
    return out


def _nonmonotonic_polls(reads: list[Op]) -> list[Anomaly]:
    out = []
    last: dict[tuple[str, str, int], int] = {}
    for op in sorted(reads, key=lambda op: op.invoke):
        for t, p, _pos in op.seeks:
            last.pop((op.client, t, p), None)
        for t, p, o, v in op.polls:
            key = (op.client, t, p)
            if key in last and o <= last[key]:
                out.append(Anomaly("nonmonotonic-poll", f"{op.client} read {t}-{p}@{o} ({v!r}) after @{last[key]}"))
            last[key] = max(o, last.get(key, -1))
    return out


def _nonmonotonic_sends(history: list[Op]) -> list[Anomaly]:
    out = []
    last: dict[tuple[str, str, int], int] = {}
    for op in sorted(history, key=lambda op: op.invoke):
        if op.outcome != "committed":
            continue
        for t, p, v, o in op.sends:
            if o is None:
                continue
            key = (op.client, t, p)
            if key in last and o <= last[key]:
                out.append(Anomaly("nonmonotonic-send", f"{op.client} wrote {v!r} at {t}-{p}@{o} after @{last[key]}"))
            last[key] = max(o, last.get(key, -1))
    return out


def _committed_offsets(history: list[Op]) -> dict[tuple[str, int], dict[int, str]]:
    """(topic, partition) -> offset -> value, for committed records whose offset is known."""
    out: dict[tuple[str, int], dict[int, str]] = defaultdict(dict)
    for op in history:
        for t, p, o, v in op.polls:
            out[(t, p)][o] = v
        if op.outcome == "committed":
            for t, p, v, o in op.sends:
                if o is not None:
                    out[(t, p)][o] = v
    return out


def _unseen(reads: list[Op], history: list[Op]) -> list[Anomaly]:
    committed = _committed_offsets(history)
    writer_ok = {v for op in history if op.outcome != "aborted" for _t, _p, v, _o in op.sends}
    out = []
    # per consumer and partition, the offsets it returned between seeks: a gap that holds a
    # committed record was skipped
    runs: dict[tuple[str, str, int], list[list[int]]] = defaultdict(lambda: [[]])
    for op in sorted(reads, key=lambda op: op.invoke):
        for t, p, _pos in op.seeks:
            runs[(op.client, t, p)].append([])
        for t, p, o, _v in op.polls:
            runs[(op.client, t, p)][-1].append(o)
    for (client, t, p), segments in runs.items():
        known = committed.get((t, p), {})
        for offs in segments:
            if len(offs) < 2:
                continue
            returned = set(offs)
            lo, hi = min(offs), max(offs)
            for o, v in known.items():
                if lo < o < hi and o not in returned and v in writer_ok:
                    out.append(Anomaly("unseen", f"{client} passed over committed {v!r} at {t}-{p}@{o}"))
    return out


def _lost(history: list[Op], finals: list[Op]) -> list[Anomaly]:
    final_values = {v for op in finals for _t, _p, _o, v in op.polls}
    out = []
    for op in history:
        if op.outcome == "committed":
            for t, p, v, o in op.sends:
                if v not in final_values:
                    out.append(Anomaly("lost", f"{v!r} ({t}-{p}@{o}) committed by {op.client} but not in the final read"))
    return out
