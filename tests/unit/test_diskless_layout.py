"""Pure parts of diskless topics (issue 29): the object layout (diskless/layout.py) and the
read cache's bookkeeping (diskless/cache.py: bound, LRU order, coalescing). The cache's loads
from a real object store are tested in tests/diskless/test_diskless_read.py."""

from __future__ import annotations

import pytest

from oncelog.diskless import layout
from oncelog.diskless.cache import ByteCache
from oncelog.protocol import records


def test_an_object_round_trips_and_names_its_batches() -> None:
    b1 = records.build_batch([(None, b"a", ())], timestamp_ms=1)
    b2 = records.build_batch([(b"k", b"bb", ()), (None, b"c", ())], timestamp_ms=2)
    body, entries = layout.build(7, 1234, [(11, b1), (12, b2)])
    assert [(e.partition_id, e.byte_offset, e.size) for e in entries] == [
        (11, layout.HEADER_SIZE, len(b1)), (12, layout.HEADER_SIZE + len(b1), len(b2))]
    broker, created, parsed = layout.parse(body)
    assert (broker, created, parsed) == (7, 1234, entries)
    assert body[entries[1].byte_offset:entries[1].byte_offset + entries[1].size] == b2


@pytest.mark.parametrize("damage", ["magic", "crc", "short", "footer"])
def test_a_damaged_object_is_refused(damage: str) -> None:
    body, _ = layout.build(1, 1, [(1, records.build_batch([(None, b"a", ())], timestamp_ms=1))])
    bad = bytearray(body)
    if damage == "magic":
        bad[0:4] = b"XXXX"
    elif damage == "crc":
        bad[10] ^= 1
    elif damage == "short":
        bad = bad[:20]
    else:
        bad = bad[:-3]
    with pytest.raises(ValueError):
        layout.parse(bytes(bad))


def test_keys_carry_their_time_and_sort_by_it() -> None:
    keys = [layout.new_key(3, "0123456789abcdef", t) for t in (1_000, 2_000, 1_700_000_000_000, 1_700_000_000_001)]
    assert [layout.key_time_ms(k) for k in keys] == [1_000, 2_000, 1_700_000_000_000, 1_700_000_000_001]
    assert sorted(keys) == keys
    assert keys[0].startswith("v1/") and keys[0].endswith("-b3-01234567.olo")
    assert len({layout.new_key(3, "x", 5) for _ in range(1000)}) == 1000  # unique within a millisecond
    for foreign in ("v1/notauuid-b1-x.olo", "other/file.txt", "v1/00000000-0000-4000-8000-000000000000-b1-x.olo"):
        assert layout.key_time_ms(foreign) is None


def test_the_cache_is_bounded_and_least_recently_used_goes_first() -> None:
    c = ByteCache(None, 100)
    c.put("o", 0, b"a" * 40)
    c.put("o", 40, b"b" * 40)
    assert c.get("o", 0) == b"a" * 40  # now the most recent
    c.put("o", 80, b"c" * 40)  # 120 > 100: the least recently used (offset 40) goes
    assert c.get("o", 40) is None and c.get("o", 0) is not None and c.get("o", 80) is not None
    assert c.size == 80
    c.put("o", 200, b"x" * 101)  # larger than the whole cache: not kept, nothing evicted
    assert c.get("o", 200) is None and c.size == 80


def test_loads_coalesce_close_ranges_only() -> None:
    c = ByteCache(None, 1 << 20, coalesce_gap=100)
    groups = c._coalesce([(0, 10), (10, 10), (150, 10), (1000, 5)])
    assert groups == [[(0, 10), (10, 10)], [(150, 10)], [(1000, 5)]]
