"""Issue 2 through real clients: topics, produce with acks=all, consume by assign from earliest
and latest, compressed batches (R1, R2).

Every test here writes and reads only a topic of its own name and never restarts the broker, so
they share one (``module_broker``)."""

from __future__ import annotations

import pytest

from kafka_clients import CLIENTS, consume, create_topic, produce

pytestmark = pytest.mark.integration

N = 100_000
PARTITIONS = 4


def _items(n: int, partitions: int, tag: str) -> list[tuple[int, bytes, bytes]]:
    return [(i % partitions, f"k{i}".encode(), f"{tag}-{i:08d}".encode().ljust(100, b".")) for i in range(n)]


def _check_exact(items: list[tuple[int, bytes, bytes]], got: list) -> None:
    expected: dict[int, list[bytes]] = {}
    for p, _k, v in items:
        expected.setdefault(p, []).append(v)
    seen: dict[int, list[bytes]] = {}
    offsets: dict[int, list[int]] = {}
    for p, off, _k, v in got:
        seen.setdefault(p, []).append(v)
        offsets.setdefault(p, []).append(off)
    for p in expected:
        assert len(seen.get(p, [])) == len(expected[p]), f"partition {p}: {len(seen.get(p, []))} of {len(expected[p])}"
        assert seen[p] == expected[p], f"partition {p}: records differ or are out of order"
        assert offsets[p] == list(range(offsets[p][0], offsets[p][0] + len(offsets[p]))), "offsets not contiguous"


@pytest.mark.slow
@pytest.mark.parametrize("client", CLIENTS)
def test_produce_100k_acks_all_and_consume_from_earliest(module_broker, client: str) -> None:
    topic = f"bulk-{client}"
    create_topic(client, module_broker.bootstrap, topic, PARTITIONS)
    items = _items(N, PARTITIONS, client)
    acked = produce(client, module_broker.bootstrap, topic, items, acks="all" if client != "confluent" else "all")
    assert len(acked) == N
    assert len(set(acked)) == N, "two records acknowledged at the same offset"
    got = consume(client, module_broker.bootstrap, topic, list(range(PARTITIONS)), expected=N, timeout=180)
    _check_exact(items, got)


@pytest.mark.parametrize("client", CLIENTS)
def test_consume_from_latest_sees_only_new_records(module_broker, client: str) -> None:
    topic = f"latest-{client}"
    create_topic(client, module_broker.bootstrap, topic, 2)
    produce(client, module_broker.bootstrap, topic, _items(50, 2, "old"))
    new = _items(30, 2, "new")
    got = consume(
        client, module_broker.bootstrap, topic, [0, 1], expected=30, start="latest", timeout=60, settle=0.5,
        on_ready=lambda: produce("confluent", module_broker.bootstrap, topic, new),
    )
    assert sorted(v for *_, v in got) == sorted(v for *_, v in new)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip(module_broker, client: str, codec: str) -> None:
    topic = f"codec-{client}-{codec}"
    create_topic("confluent", module_broker.bootstrap, topic, 2)
    items = _items(2000, 2, codec)
    produce(client, module_broker.bootstrap, topic, items, compression=codec)
    # Read back with a different client than the writer, so each client reads another's batches.
    reader = CLIENTS[(CLIENTS.index(client) + 1) % len(CLIENTS)]
    got = consume(reader, module_broker.bootstrap, topic, [0, 1], expected=len(items), timeout=60)
    _check_exact(items, got)
