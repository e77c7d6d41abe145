"""The history checker is itself tested: a clean history passes, and each planted anomaly is
reported under its own kind (issue 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog_tools.verify import history as h
from oncelog_tools.verify.checker import KINDS, check
from oncelog_tools.verify.history import Op


def clean() -> list[Op]:
    return [
        Op("p1", 0.0, 1.0, "committed", sends=[("t", 0, "a", 0), ("t", 0, "b", 1)]),
        Op("p1", 1.0, 2.0, "aborted", sends=[("t", 0, "x", 2)]),
        Op("p1", 2.0, 3.0, "committed", sends=[("t", 0, "c", 4)]),
        Op("p2", 3.0, 4.0, "unknown", sends=[("t", 0, "u", None)]),
        Op("c1", 4.0, 5.0, "committed", polls=[("t", 0, 0, "a"), ("t", 0, 1, "b")]),
        Op("c1", 5.0, 6.0, "committed", polls=[("t", 0, 4, "c")]),
        Op("final", 9.0, 10.0, "committed", polls=[("t", 0, 0, "a"), ("t", 0, 1, "b"), ("t", 0, 4, "c")], final_read=True),
    ]


def test_clean_history_has_no_anomalies() -> None:
    report = check(clean())
    assert report.ok, report.anomalies
    assert report.counts["committed"] == 2 and report.counts["aborted"] == 1


PLANTS = {
    "lost": lambda hs: hs[-1].polls.pop(),
    "duplicate": lambda hs: hs.append(Op("c2", 6.0, 7.0, "committed", polls=[("t", 0, 7, "a")])),
    "aborted-read": lambda hs: hs[5].polls.append(("t", 0, 2, "x")),
    "uncommitted-read": lambda hs: hs.insert(0, Op("c0", -2.0, -1.0, "committed", polls=[("t", 0, 0, "a")])),
    "inconsistent-offset": lambda hs: hs.append(Op("c3", 6.0, 7.0, "committed", polls=[("t", 0, 1, "zz")])),
    "nonmonotonic-poll": lambda hs: hs.append(Op("c1", 6.5, 7.0, "committed", polls=[("t", 0, 1, "b")])),
    "nonmonotonic-send": lambda hs: hs.append(Op("p1", 7.0, 8.0, "committed", sends=[("t", 0, "d", 3)])),
    "unseen": lambda hs: hs.append(Op("c4", 6.0, 7.0, "committed", polls=[("t", 0, 0, "a"), ("t", 0, 4, "c")])),
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_planted_anomaly_is_reported(kind: str) -> None:
    hs = clean()
    PLANTS[kind](hs)
    report = check(hs)
    assert report.by_kind()[kind] >= 1, f"{kind} not found: {report.anomalies}"


def test_history_round_trips_through_json_lines(tmp_path: Path) -> None:
    hs = clean()
    h.save(hs, tmp_path / "history.jsonl")
    assert h.load(tmp_path / "history.jsonl") == hs


def test_seek_resets_poll_monotonicity() -> None:
    hs = clean()
    hs.append(Op("c1", 6.5, 7.0, "committed", seeks=[("t", 0, 0)], polls=[("t", 0, 0, "a")]))
    assert check(hs).ok


def test_without_final_read_lost_is_not_checked() -> None:
    hs = [op for op in clean() if not op.final_read]
    report = check(hs)
    assert report.ok and report.notes
