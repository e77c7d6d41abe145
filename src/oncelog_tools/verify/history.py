"""The history of a Jepsen-style queue workload: what every client did and what it observed.

A history is a list of ``Op``s, each one transaction (or one non-transactional action) of one
client, with its invocation and completion times (monotonic seconds) and its outcome:

* ``committed``: the client was told the transaction committed;
* ``aborted``: the client aborted it (or was told it failed in a way that guarantees it did not
  commit, such as a fenced producer's abort);
* ``unknown``: the client does not know (it crashed, timed out, lost its connection).

Inside an op, ``sends`` are (topic, partition, value, offset-or-None) and ``polls`` are
(topic, partition, offset, value) of records the client's read_committed consumer returned, in
the order returned. ``seeks`` mark where a consumer repositioned (after a restart or a
rebalance), which resets monotonicity checking for that partition.

Values are unique across the whole run (the workload makes them so); that is what lets the
checker tell a duplicate from two writes of equal content.

Histories are written as JSON lines, so a failing run can be kept and checked again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Literal

Outcome = Literal["committed", "aborted", "unknown"]


@dataclass
class Op:
    client: str
    invoke: float
    complete: float
    outcome: Outcome
    sends: list[tuple[str, int, str, int | None]] = field(default_factory=list)
    polls: list[tuple[str, int, int, str]] = field(default_factory=list)
    seeks: list[tuple[str, int, int]] = field(default_factory=list)
    #: a final read of everything (read_committed, from the start to the end of each partition)
    final_read: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> "Op":
        d = json.loads(line)
        return cls(
            d["client"], d["invoke"], d["complete"], d["outcome"],
            [tuple(s) for s in d["sends"]], [tuple(p) for p in d["polls"]], [tuple(s) for s in d["seeks"]],
            d.get("final_read", False),
        )  # type: ignore[arg-type]


def save(history: Iterable[Op], path: Path) -> None:
    with open(path, "w") as f:
        for op in history:
            f.write(op.to_json() + "\n")


def load(path: Path) -> list[Op]:
    return [Op.from_json(line) for line in Path(path).read_text().splitlines() if line.strip()]
