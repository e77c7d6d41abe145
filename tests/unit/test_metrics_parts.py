"""The pure parts of the metrics module (issue 19): the address, the lag, Kafka's request tag,
and the metric families built from a snapshot, rendered by prometheus_client and parsed back."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.observability.metrics import RequestStats, families, lag, request_label
from oncelog.broker.observability.observe import BrokerState, GroupRow, PartitionRow, SharePartitionRow, TxnRow
from oncelog.hostport import parse_listen
from oncelog.protocol import apis
from oncelog.protocol.errors import InvalidConfig



def _embedded() -> object:
    """What ``observe.take`` reads of the membership (broker/membership/): this node alone."""
    from types import SimpleNamespace

    from oncelog.broker.membership import Node

    return SimpleNamespace(mode="embedded", nodes=lambda listener: [Node(1, "127.0.0.1", 9092, None)])

def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9308") == ("127.0.0.1", 9308)
    assert parse_listen("0.0.0.0:0") == ("0.0.0.0", 0)
    assert parse_listen("[::1]:9308") == ("::1", 9308)
    for bad in ("nonsense", ":9308", "host:", "host:70000", "host:x"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_config_key() -> None:
    assert BrokerConfig().metrics_listen is None  # off by default
    assert BrokerConfig().with_overrides({"metrics.listen": "127.0.0.1:9308"}).metrics_listen == "127.0.0.1:9308"
    assert BrokerConfig().with_overrides({"metrics.listen": ""}).metrics_listen is None
    with pytest.raises(InvalidConfig, match="metrics.listen"):
        BrokerConfig().with_overrides({"metrics.listen": "9308"})


def test_endpoint_bounds() -> None:
    """The values tests/integration/test_metrics.py's hostile test relies on."""
    from oncelog.broker.observability import metrics

    assert metrics.MAX_CONNECTIONS == 8 and metrics.REQUEST_DEADLINE_S == 10.0


def test_lag_and_request_label() -> None:
    assert lag(10, 4) == 6
    assert lag(10, 12) == 0  # a position past the end (after a truncation) is caught up
    assert request_label(apis.PRODUCE) == "Produce"
    assert request_label(apis.API_VERSIONS) == "ApiVersions"


class _Families:
    def __init__(self, snap: BrokerState, now_ms: int) -> None:
        self.snap, self.now_ms = snap, now_ms

    def collect(self):  # type: ignore[no-untyped-def]
        return families(self.snap, self.now_ms)


def test_families_from_a_snapshot() -> None:
    stats = RequestStats()
    for seconds in (0.0002, 0.003, 0.003, 7.0, 60.0):
        stats.request(apis.PRODUCE, seconds, 0)
    stats.request(apis.FETCH, 0.001, 0)  # on a bucket bound: counted in that bucket (le)
    stats.error(apis.PRODUCE, 6)
    stats.request(apis.METADATA, 0.001, 3)
    stats.produced("t", 1000, 10)
    stats.produced("t", 500, 5)
    stats.fetched("t", 700)
    snap = BrokerState(
        requests=stats.copy(),
        partitions=[PartitionRow("t", 0, 0, 120, 100, 4096, 2, 3), PartitionRow("t", 1, 5, 5, 5, 0, 1, 0)],
        committed=[("g", "t", 0, 90), ("g", "gone", 0, 7)],
        txns=[TxnRow("a", "Ongoing", 1, 0, 60_000, 1_000, frozenset()),
              TxnRow("b", "PrepareCommit", 2, 0, 60_000, 4_000, frozenset())], txn_committed=5, txn_aborted=2, txn_timed_out=1,
        connections={"PLAINTEXT": 3}, now_ms=11_000,
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(snap, snap.now_ms))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(text) for s in f.samples}
    produce = (("request", "Produce"),)
    assert got[("kafka_network_requestmetrics_requests_total", produce)] == 5
    assert got[("kafka_network_requestmetrics_totaltime_seconds_count", produce)] == 5
    assert got[("kafka_network_requestmetrics_totaltime_seconds_sum", produce)] == pytest.approx(67.0062)
    assert got[("kafka_network_requestmetrics_totaltime_seconds_bucket", (("le", "0.0005"), *produce))] == 1
    assert got[("kafka_network_requestmetrics_totaltime_seconds_bucket", (("le", "0.005"), *produce))] == 3
    assert got[("kafka_network_requestmetrics_totaltime_seconds_bucket", (("le", "10.0"), *produce))] == 4
    assert got[("kafka_network_requestmetrics_totaltime_seconds_bucket", (("le", "+Inf"), *produce))] == 5
    fetch_le = (("le", "0.001"), ("request", "Fetch"))
    assert got[("kafka_network_requestmetrics_totaltime_seconds_bucket", fetch_le)] == 1
    assert got[("kafka_network_requestmetrics_errors_total", (("error", "NOT_LEADER_OR_FOLLOWER"), *produce))] == 1
    assert got[("kafka_network_requestmetrics_errors_total",
                (("error", "UNKNOWN_TOPIC_OR_PARTITION"), ("request", "Metadata")))] == 1
    assert got[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "t"),))] == 1500
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "t"),))] == 15
    assert got[("kafka_server_brokertopicmetrics_bytesout_total", (("topic", "t"),))] == 700
    tp0 = (("partition", "0"), ("topic", "t"))
    assert got[("kafka_log_log_logendoffset", tp0)] == 120
    assert got[("kafka_log_log_laststableoffsetlag", tp0)] == 20
    assert got[("kafka_log_log_size", tp0)] == 4096
    assert got[("kafka_log_log_numlogsegments", tp0)] == 2
    assert got[("kafka_server_replicamanager_produceridcount", ())] == 3
    g = (("consumergroup", "g"), ("partition", "0"), ("topic", "t"))
    assert got[("kafka_consumergroup_lag", g)] == 30
    assert not any(k[0] == "kafka_consumergroup_lag" and ("topic", "gone") in k[1] for k in got)  # no log end: no lag
    assert got[("kafka_coordinator_transaction_open", ())] == 2
    assert got[("kafka_coordinator_transaction_oldest_open_age_seconds", ())] == 10.0
    assert got[("kafka_coordinator_transaction_completed_total", (("outcome", "timed_out"),))] == 1
    assert got[("kafka_server_socketservermetrics_connection_count", (("listener", "PLAINTEXT"),))] == 3


def _samples(snap: BrokerState) -> dict:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(snap, snap.now_ms))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_diskless_families_only_with_an_object_store() -> None:
    """Issue 29: the diskless parts' counters (``DisklessParts.counters``) become the
    ``oncelog_diskless_*`` families; a broker without an object store exports none of them."""
    counters = {"requests_PUT": 7, "requests_GET": 3, "requests_LIST": 1, "put_bytes": 7000, "get_bytes": 900,
                "retries": 2, "cache_hits": 40, "cache_misses": 3, "cache_bytes": 5000, "objects": 7,
                "object_bytes": 7000, "commits": 7, "batches": 21, "damaged_missing": 2, "damaged_corrupt": 1}
    got = _samples(BrokerState(diskless=counters))
    assert got[("oncelog_diskless_object_requests_total", (("request", "PUT"),))] == 7
    assert got[("oncelog_diskless_object_requests_total", (("request", "GET"),))] == 3
    assert got[("oncelog_diskless_object_requests_total", (("request", "LIST"),))] == 1
    assert got[("oncelog_diskless_object_bytes_total", (("direction", "put"),))] == 7000
    assert got[("oncelog_diskless_object_bytes_total", (("direction", "get"),))] == 900
    assert got[("oncelog_diskless_object_retries_total", ())] == 2
    assert got[("oncelog_diskless_cache_lookups_total", (("result", "hit"),))] == 40
    assert got[("oncelog_diskless_cache_lookups_total", (("result", "miss"),))] == 3
    assert got[("oncelog_diskless_cache_bytes", ())] == 5000
    assert got[("oncelog_diskless_writer_objects_total", ())] == 7
    assert got[("oncelog_diskless_writer_commits_total", ())] == 7
    assert got[("oncelog_diskless_writer_batches_total", ())] == 21
    assert got[("oncelog_diskless_damaged_batches_total", (("kind", "missing"),))] == 2
    assert got[("oncelog_diskless_damaged_batches_total", (("kind", "truncated"),))] == 0
    assert got[("oncelog_diskless_damaged_batches_total", (("kind", "corrupt"),))] == 1
    assert not any(k[0].startswith("oncelog_diskless_") for k in _samples(BrokerState()))


def test_group_and_share_partition_families() -> None:
    snap = BrokerState(
        partitions=[PartitionRow("t", 0, 0, 120, 100, 4096, 2, 3)],
        groups=[GroupRow("old", "Stable", "consumer", "range", 4, (("m", None, "c", "/h", b""),)),
                GroupRow("new", "Assigning", "consumer", "", 9, (), "consumer", ()),
                GroupRow("q", "Stable", "share", "", 3, (("a", None, "c", "/h", b""), ("b", None, "c", "/h", b"")),
                         "share", ((), ()))],
        share_partitions=[SharePartitionRow("q", "t", 0, 100, 104, 4, 2, 97, 3),
                          SharePartitionRow("q", "elsewhere", 0, 5, 5, 0, 0, 0, 0)],
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(snap, snap.now_ms))  # type: ignore[arg-type]
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}
    for proto, n in (("classic", 1), ("consumer", 1), ("share", 1)):
        assert got[("kafka_server_group_coordinator_metrics_group_count", (("protocol", proto),))] == n
    assert got[("kafka_consumergroup_members", (("consumergroup", "q"), ("type", "share")))] == 2
    assert got[("kafka_consumergroup_epoch", (("consumergroup", "new"), ("type", "consumer")))] == 9
    assert got[("kafka_consumergroup_epoch", (("consumergroup", "old"), ("type", "classic")))] == 4
    assert got[("kafka_consumergroup_state", (("consumergroup", "new"), ("state", "Assigning"), ("type", "consumer")))] == 1
    sp = (("partition", "0"), ("sharegroup", "q"), ("topic", "t"))
    assert (got[("kafka_sharegroup_start_offset", sp)], got[("kafka_sharegroup_in_flight_records", sp)],
            got[("kafka_sharegroup_acquired_records", sp)], got[("kafka_sharegroup_lag", sp)],
            got[("kafka_sharegroup_acknowledged_records_total", sp)],
            got[("kafka_sharegroup_archived_records_total", sp)]) == (100, 4, 2, 20, 97, 3)
    assert ("kafka_sharegroup_lag", (("partition", "0"), ("sharegroup", "q"), ("topic", "elsewhere"))) not in got


def test_the_snapshot_lets_the_loop_run_between_chunks() -> None:
    """``observe.take`` (the snapshot /metrics renders) copies SNAPSHOT_CHUNK partitions per turn
    of the event loop: a callback scheduled before it runs while it is still copying (issue 26
    row 14)."""
    import asyncio
    from types import SimpleNamespace

    from oncelog.broker.observability.observe import SNAPSHOT_CHUNK, take
    from oncelog.types import TopicPartition

    seen: list[int] = []

    class Part:
        log_start_offset = high_watermark = last_stable_offset = 0
        producers = SimpleNamespace(entries={}, ongoing={})

        def __init__(self, i: int) -> None:
            self.i = i

        def disk_usage(self) -> tuple[int, int]:
            seen.append(self.i)
            return 0, 1

    n = SNAPSHOT_CHUNK * 4
    broker = SimpleNamespace(
        clock=SimpleNamespace(now_ms=lambda: 5), servers=[], transactions=None, node_id=1, cluster_id="c",
        membership=_embedded(), listener_name="PLAINTEXT", bound_listeners=lambda: [],
        replicas=SimpleNamespace(partitions={TopicPartition("t", i): Part(i) for i in range(n)}),
        groups=SimpleNamespace(shards={}, loading=set()))

    async def main() -> tuple[int, int]:
        ran_at: list[int] = []
        asyncio.get_running_loop().call_soon(lambda: ran_at.append(len(seen)))
        snap = await take(broker)  # type: ignore[arg-type]
        return len(snap.partitions), ran_at[0]

    rows, when = asyncio.run(main())
    assert rows == n
    assert 0 < when < n, "the loop ran nothing while the snapshot was taken"


def test_render_is_built_once_and_shared() -> None:
    """``BrokerMetrics.render``: scrapes within the reuse interval get the same bytes; after it,
    a new build (clock injected)."""
    from types import SimpleNamespace

    from oncelog.broker.observability.metrics import MIN_INTERVAL_S, BrokerMetrics

    class Fixed(BrokerMetrics):
        def snapshot(self) -> BrokerState:
            return BrokerState(now_ms=1, requests=self.copy())

    now = [100.0]
    m = Fixed(SimpleNamespace(), "127.0.0.1", 0, clock=lambda: now[0])  # type: ignore[arg-type]
    first = m.render()
    m.request(apis.PRODUCE, 0.001, 0)
    now[0] += MIN_INTERVAL_S / 2
    assert m.render() is first
    now[0] += MIN_INTERVAL_S
    assert m.render() != first
    assert b"oncelog_metrics_scrape_builds_total 2.0" in m.render()


def test_a_partition_deleted_while_the_snapshot_yields_is_left_out() -> None:
    """``observe.take`` (the snapshot /metrics renders) lets the loop run between chunks; a
    partition deleted meanwhile
    (DeleteTopics: ``PartitionLog.delete``, after which no method may be called) is left out of
    the snapshot wherever it is in the next chunk, never read. Before, only the first partition
    of each chunk was checked: a later deleted one was read and reported."""
    import asyncio
    from types import SimpleNamespace

    from oncelog.broker.observability.observe import SNAPSHOT_CHUNK, take
    from oncelog.types import TopicPartition

    class Part:
        log_start_offset = high_watermark = last_stable_offset = 0
        producers = SimpleNamespace(entries={}, ongoing={})
        deleted = False

        def disk_usage(self) -> tuple[int, int]:
            assert not self.deleted, "a deleted partition's log was read"
            return 0, 1

    n = SNAPSHOT_CHUNK * 2
    partitions = {TopicPartition("t", i): Part() for i in range(n)}
    broker = SimpleNamespace(clock=SimpleNamespace(now_ms=lambda: 5), servers=[], transactions=None, node_id=1,
                             cluster_id="c", membership=_embedded(), listener_name="PLAINTEXT",
                             bound_listeners=lambda: [], replicas=SimpleNamespace(partitions=partitions),
                             groups=SimpleNamespace(shards={}, loading=set()))
    gone = [TopicPartition("t", SNAPSHOT_CHUNK), TopicPartition("t", SNAPSHOT_CHUNK + 3)]

    def delete() -> None:  # what DeleteTopics does while the snapshot waits for its next turn
        for tp in gone:
            partitions.pop(tp).deleted = True

    async def main() -> list[int]:
        asyncio.get_running_loop().call_soon(delete)
        snap = await take(broker)  # type: ignore[arg-type]
        return [row.partition for row in snap.partitions]

    got = asyncio.run(main())
    assert got == [i for i in range(n) if TopicPartition("t", i) not in gone]
