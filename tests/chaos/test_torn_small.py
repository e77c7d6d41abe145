"""Issue 8, scenario 3 in small: torn writes and damaged derived files between broker runs.

The full run is ``oncelog verify torn --rounds 50`` (docs/RELIABILITY.md). This scenario found
the lost-aborted-index bug (aborted records became visible to read_committed after the index file
was cut); it stays here as its regression test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog_tools.verify import torn

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("seed", [5, 6])
def test_torn_writes_lose_nothing_acknowledged(tmp_path: Path, seed: int) -> None:
    result = torn.run(tmp_path, rounds=4, seed=seed, per_round=150)
    assert result.rounds == 4
    assert result.acked > 400
    assert sum(result.faults.values()) > 10, result.faults
    assert result.anomalies == []
