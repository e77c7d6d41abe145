"""Issue 8, scenario 1 in small: transactional copy under broker and copier SIGKILLs, with a
concurrent read_committed reader. The full run is ``oncelog verify copy`` (docs/RELIABILITY.md).

This scenario found that a zombie copier's TxnOffsetCommit could leave pending offsets that no
transaction would ever settle, stalling every restarted copier; it stays as its regression test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog_tools.verify import copy

pytestmark = pytest.mark.integration


def test_transactional_copy_under_kills(tmp_path: Path) -> None:
    result = copy.run(tmp_path, records=8_000, partitions=2, broker_kills=2, copier_kills=2, seed=11, time_limit=240,
                      txn_records=100, txn_pause_ms=100)
    assert result.broker_kills == 2 and result.copier_kills == 2
    assert result.copied == 8_000
    assert result.anomalies == []
