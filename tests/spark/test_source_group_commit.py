"""The source's optional progress commit to a consumer group (``groupIdForLag``), so that
consumer-group tooling shows the pipeline's lag (R23, R3). Spark's checkpoint stays the source
of truth; the group only mirrors it.

Needs the group coordinator (FindCoordinator, OffsetCommit, OffsetFetch)."""

from __future__ import annotations

import pytest

from sparkutil import create_topics, group_offsets, items, latest_offsets, produce, run_available_now, stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_processed_offsets_are_committed_to_the_lag_group(spark, broker, tmp_path) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"lag": 2})
    produce(bs, "lag", items(900, 2, "l"))
    df = stream(spark, bs, subscribe="lag", startingOffsets="earliest", maxOffsetsPerTrigger="300", groupIdForLag="pipeline-lag")
    rows: list = []
    run_available_now(df, str(tmp_path / "ckpt"), into=rows)
    assert len(rows) == 900
    ends = latest_offsets(bs, "lag", 2)
    # Everything processed is committed: the lag is zero once the query has caught up.
    assert group_offsets(bs, "pipeline-lag") == {("lag", p): n for p, n in ends.items()}
