"""One scenario, two storage engines (issue 15): random sequences of appends, reads and log
start moves give the same bytes, offsets and errors on the local-files engine
(storage/engines/local/log.py) and on the PostgreSQL engine (storage/engines/postgres/log.py)."""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol import records as R
from oncelog.protocol.errors import OffsetOutOfRange
from oncelog.storage.engine import PartitionEngine
from oncelog.storage.parts import ReadPart
from oncelog.storage.config import LogConfig
from oncelog.storage.engines.local.log import PartitionLog

LOCAL = LogConfig(segment_bytes=1_500, index_interval_bytes=200, retention_ms=-1)
_names = itertools.count()

append_op = st.tuples(st.just("append"), st.integers(1, 5), st.integers(0, 200), st.integers(0, 10_000))
read_op = st.tuples(st.just("read"), st.floats(0, 1.2), st.integers(1, 3_000), st.one_of(st.none(), st.floats(0, 1.1)),
                    st.booleans())
start_op = st.tuples(st.just("start"), st.floats(0, 1))
ops = st.lists(st.one_of(append_op, append_op, read_op, start_op), min_size=1, max_size=40)


def _bytes(parts: list[ReadPart]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else os.pread(p.fd, p.length, p.position) for p in parts)


def _read(log: PartitionEngine, *args) -> bytes | str:
    try:
        return _bytes(log.read(*args))
    except OffsetOutOfRange:
        return "OffsetOutOfRange"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(ops=ops)
def test_local_and_postgres_engines_agree(store, ops) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        local = PartitionLog.open(Path(tmp) / "t-0", LOCAL, 0)
        pg = store.lead(f"agree{next(_names)}", config=LOCAL)
        try:
            for op in ops:
                end = local.log_end_offset
                if op[0] == "append":
                    _, n, size, ts = op
                    buf = R.build_batch([(b"k", os.urandom(size), ())] * n, timestamp_ms=ts)
                    h = R.parse_header(buf)
                    assert local.append(buf, h, 0, leader_epoch=pg.leader_epoch) == pg.append(buf, h, 0)
                elif op[0] == "read":
                    _, frac, max_bytes, max_frac, min_one = op
                    offset = int(frac * end)
                    max_offset = None if max_frac is None else int(max_frac * end)
                    assert _read(local, offset, max_bytes, max_offset, min_one) == _read(pg, offset, max_bytes, max_offset, min_one)
                else:
                    offset = int(op[1] * end)
                    local.set_log_start_offset(offset)
                    pg.set_log_start_offset(offset)
                assert (local.log_start_offset, local.log_end_offset) == (pg.log_start_offset, pg.log_end_offset)
            start = local.log_start_offset
            assert list(local.iter_headers(start)) == list(pg.iter_headers(start))
            assert [d for _h, d in local.iter_batches()] == [d for _h, d in pg.iter_batches()]
            for ts in (0, 2_500, 5_000, 9_999, 10_001):
                assert local.offset_for_timestamp(ts) == pg.offset_for_timestamp(ts), ts
            if start == 0:
                assert local.max_timestamp_offset() == pg.max_timestamp_offset()
        finally:
            local.close()
