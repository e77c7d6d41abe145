"""Prometheus metrics for operators (issue 19, docs/METRICS.md): off unless ``metrics.listen``.

Theory of operation. Two kinds of metric, chosen by cost:

* counted on the request path, once per request (``Dispatcher.handle``: count, latency, error
  code) or once per partition batch of a request (Produce: bytes and records in, the record
  count taken from the batch header; Fetch: bytes out). Never per record. These are plain ints
  in plain dicts (``RequestStats``), so a hot-path update is a dict lookup and a few additions;
  they become Prometheus counters and histograms only at scrape time.
* read at scrape time (``observe.take``, the snapshot the web console reads too): log end
  offset, LSO, LSO lag, size and segment count per partition; open transactions and the age of the oldest; transactions committed /
  aborted / timed out (plain ``int`` counters the transaction coordinator keeps anyway);
  producer ids in memory; consumer group lag; connections. Nothing is updated for these on the
  hot path.

Threads. The HTTP server is ``metrics_http.MetricsHTTPServer`` (``oncelog.http_server``'s
``BoundedHTTPServer``) on a daemon thread: at
most ``MAX_CONNECTIONS`` connections at once (more are closed at once), each request within
``REQUEST_DEADLINE_S`` in all (a client that sends half a request is dropped then), so no
client of the endpoint can hold broker threads or slow Kafka clients (issue 26 row 8). The
event loop owns every piece of broker state, so a scrape does not read it from the HTTP thread:
it schedules ``observe.take`` on the loop (``run_coroutine_threadsafe``) and waits at most
``SNAPSHOT_TIMEOUT_S``; the snapshot (``observe.BrokerState``) is plain values, turned into
metric families on the HTTP thread. The request-path counters are copied in the same snapshot. A snapshot that fails or
times out is logged and the scrape answers ``oncelog_metrics_scrape_errors_total`` alone
(which counts it): a collector never takes the broker down.

Cost (issue 26 row 14: on 6,200 partitions, back-to-back scrapes raised Kafka's produce p50
tenfold). The snapshot is copied ``observe.SNAPSHOT_CHUNK`` rows (partitions, groups, committed
offsets, transactional ids) per turn of the loop, which serves requests between chunks; the
encoded answer is built by one scrape at a time and reused for ``MIN_INTERVAL_S``, or
``LOOP_SHARE`` times what building it took when that is longer, by every scrape meanwhile
(``BrokerMetrics.render``); and the HTTP thread lets the loop take the GIL between chunks of
rows while it builds. So any number of scrapers cost the
broker at most about 1/LOOP_SHARE of its time, measured by ``bench/metrics_scrape.py``.

When ``metrics.listen`` is unset the broker holds ``metrics = None``: the request path makes a
``None`` check and nothing else, and ``prometheus_client`` is not even imported.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from oncelog.broker.observability.observe import BrokerState, lag, take
from oncelog.broker.request_stats import LATENCY_BUCKETS, RequestStats
from oncelog.hostport import parse_listen
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidConfig

if TYPE_CHECKING:
    from oncelog.broker.observability.observed import ObservedBroker

log = logging.getLogger(__name__)

#: how long a scrape waits for the event loop to take the snapshot
SNAPSHOT_TIMEOUT_S = 5.0
#: a scrape's answer is reused for at least this long (seconds) by every scrape meanwhile ...
MIN_INTERVAL_S = 1.0
#: ... or for LOOP_SHARE times as long as building it took, when that is longer (<= 2%)
LOOP_SHARE = 50
#: rows of metric families built between two moments the HTTP thread lets the loop run
RENDER_PAUSE_ROWS = 512
#: connections the endpoint serves at once; each request's deadline, whole (issue 26 row 8)
MAX_CONNECTIONS = 8
REQUEST_DEADLINE_S = 10.0


def request_label(api_key: int) -> str:
    """Kafka's ``request`` tag for an API: ``Produce``, ``ApiVersions``, ``InitProducerId``."""
    return "".join(w.capitalize() for w in apis.api_name(api_key).split("_"))


class BrokerMetrics(RequestStats):
    """The broker's metrics: the request-path counters (``RequestStats``: ``request``,
    ``produced``, ``fetched``, ``error``, called on the event loop) and, once ``serve()`` is
    called, the HTTP endpoint answering ``render()``."""

    __slots__ = ("broker", "host", "port", "registry", "_scrape_errors", "_builds", "_build_seconds", "_loop",
                 "_server", "_thread", "_render_lock", "_body", "_at", "_interval", "clock")

    def __init__(self, broker: "ObservedBroker", host: str, port: int, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        super().__init__()
        self.broker = broker
        self.host, self.port = host, port
        self.registry = CollectorRegistry(auto_describe=False)
        self._scrape_errors = Counter("oncelog_metrics_scrape_errors", "Scrapes whose broker snapshot failed",
                                      registry=self.registry)
        self._builds = Counter("oncelog_metrics_scrape_builds", "Scrape answers built (each one is shared by "
                               "every scrape for a while)", registry=self.registry)
        self._build_seconds = Gauge("oncelog_metrics_scrape_build_seconds", "What building the previous scrape "
                                    "answer cost the broker (event loop and HTTP thread)", registry=self.registry)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._render_lock = threading.Lock()  # one build at a time; the others wait and share it
        self._body: bytes | None = None
        self._at = float("-inf")
        self._interval = MIN_INTERVAL_S
        self.clock = clock

    # -- the endpoint ----------------------------------------------------------------------------

    def serve(self) -> tuple[str, int]:
        """Listen on (host, port) and serve /metrics on a daemon thread; returns the bound
        address. Must be called on the event loop. Raises OSError when the address refuses."""
        from oncelog.broker.observability.metrics_http import MetricsHTTPServer  # http.server only when serving

        self._loop = asyncio.get_running_loop()
        server = MetricsHTTPServer((self.host, self.port), self, max_connections=MAX_CONNECTIONS,
                                   request_deadline_s=REQUEST_DEADLINE_S, ipv6=":" in self.host)
        self._server = server
        self.host, self.port = server.server_address[:2]
        self._thread = threading.Thread(target=server.serve_forever, name="oncelog-metrics", daemon=True)
        self._thread.start()
        shown = f"[{self.host}]" if ":" in self.host else self.host
        log.info("metrics on http://%s:%d/metrics", shown, self.port)
        return self.host, self.port

    def close(self) -> None:
        """Stop serving (waits for a scrape in progress); idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def snapshot(self) -> BrokerState | None:
        """Called on the HTTP thread: the broker's state, taken on the event loop; None (logged)
        when that fails or takes longer than SNAPSHOT_TIMEOUT_S."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return None

        async def snapshot() -> BrokerState:
            snap = await take(self.broker)
            snap.requests = self.copy()
            return snap

        fut = asyncio.run_coroutine_threadsafe(snapshot(), loop)
        try:
            return fut.result(SNAPSHOT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a scrape must never take the broker down
            fut.cancel()
            log.warning("metrics: the broker snapshot failed: %r", exc)
            self._scrape_errors.inc()
            return None

    def render(self) -> bytes:
        """The text exposition of every metric: built by one caller at a time (the others wait
        for it) and reused for ``MIN_INTERVAL_S``, or LOOP_SHARE times what building it took
        (the loop's share and this thread's CPU), so scrapes cost the broker a bounded share of
        its time however many there are and however often they come. Thread-safe."""
        from prometheus_client import generate_latest

        with self._render_lock:
            if self._body is not None and self.clock() - self._at < self._interval:
                return self._body
            cpu = time.thread_time()
            snap = self.snapshot()
            self._builds.inc()
            body = generate_latest(_Scrape(self, snap))  # type: ignore[arg-type]
            took = (time.thread_time() - cpu) + (snap.loop_s if snap is not None else 0.0)
            self._build_seconds.set(took)
            self._interval = max(MIN_INTERVAL_S, took * LOOP_SHARE)
            self._body, self._at = body, self.clock()
            return body


def _pause() -> None:
    """Let the event loop's thread take the GIL (a scrape's build yields to the broker)."""
    time.sleep(0)


class _Scrape:
    """What one ``render`` exposes: the endpoint's own counter, then one snapshot's families,
    yielding the GIL between families."""

    def __init__(self, metrics: BrokerMetrics, snap: BrokerState | None) -> None:
        self.metrics, self.snap = metrics, snap

    def collect(self) -> Iterator[Any]:
        yield from self.metrics.registry.collect()
        if self.snap is None:
            return
        for family in families(self.snap, self.snap.now_ms, pause=_pause):
            yield family
            _pause()


def request_families(stats: RequestStats) -> Iterator[Any]:
    """The request-path metric families (pure)."""
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    count = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests handled, by API",
                                labels=["request"])
    latency = HistogramMetricFamily("kafka_network_requestmetrics_totaltime_seconds",
                                    "Time from a request's arrival to its encoded response, by API",
                                    labels=["request"])
    for api_key, s in sorted(stats.per_api.items()):
        name = request_label(api_key)
        count.add_metric([name], s[0])
        buckets, running = [], 0
        for bound, n in zip((*LATENCY_BUCKETS, float("inf")), s[2:]):
            running += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        latency.add_metric([name], buckets, s[1])
    yield count
    yield latency
    errors = CounterMetricFamily("kafka_network_requestmetrics_errors", "Error codes answered, by API and error",
                                 labels=["request", "error"])
    for (api_key, code), n in sorted(stats.errors.items()):
        try:
            ename = ErrorCode(code).name.upper()
        except ValueError:
            ename = str(code)
        errors.add_metric([request_label(api_key), ename], n)
    yield errors
    bytes_in = CounterMetricFamily("kafka_server_brokertopicmetrics_bytesin", "Produced bytes (whole batches), by topic",
                                   labels=["topic"])
    records_in = CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin",
                                     "Produced records (from the batch headers), by topic", labels=["topic"])
    for topic, (nbytes, nrecords) in sorted(stats.topic_in.items()):
        bytes_in.add_metric([topic], nbytes)
        records_in.add_metric([topic], nrecords)
    yield bytes_in
    yield records_in
    bytes_out = CounterMetricFamily("kafka_server_brokertopicmetrics_bytesout", "Fetched bytes (whole batches), by topic",
                                    labels=["topic"])
    for topic, nbytes in sorted(stats.topic_out.items()):
        bytes_out.add_metric([topic], nbytes)
    yield bytes_out


def families(snap: BrokerState, now_ms: int, *, pause: Callable[[], None] | None = None) -> Iterator[Any]:
    """The metric families of one snapshot (pure: no broker access). ``pause`` is called every
    RENDER_PAUSE_ROWS rows (a scrape lets the event loop run)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    if snap.requests is not None:
        yield from request_families(snap.requests)

    tp_labels = ["topic", "partition"]

    def gauge(name: str, doc: str, labels: list[str] | None = None) -> Any:
        return GaugeMetricFamily(name, doc, labels=labels if labels is not None else tp_labels)

    start = gauge("kafka_log_log_logstartoffset", "First offset of the partition's log")
    end = gauge("kafka_log_log_logendoffset", "Log end offset (the high watermark of a single replica)")
    lso = gauge("kafka_log_log_laststableoffset", "Last stable offset: the first offset of the oldest open transaction")
    lso_lag = gauge("kafka_log_log_laststableoffsetlag", "Log end offset minus last stable offset")
    size = gauge("kafka_log_log_size", "Bytes in the partition's segments (-1: not on local files)")
    segs = gauge("kafka_log_log_numlogsegments", "Segments of the partition's log (-1: not on local files)")
    pids = gauge("kafka_log_log_produceridcount", "Producer ids the partition keeps state for")
    total_pids = 0
    for i, row in enumerate(snap.partitions):
        if pause is not None and i and i % RENDER_PAUSE_ROWS == 0:
            pause()
        lv = [row.topic, str(row.partition)]
        start.add_metric(lv, row.log_start)
        end.add_metric(lv, row.log_end)
        lso.add_metric(lv, row.lso)
        lso_lag.add_metric(lv, lag(row.log_end, row.lso))
        size.add_metric(lv, row.size_bytes)
        segs.add_metric(lv, row.segments)
        pids.add_metric(lv, row.producers)
        total_pids += row.producers
    yield from (start, end, lso, lso_lag, size, segs, pids)
    yield GaugeMetricFamily("kafka_server_replicamanager_produceridcount",
                            "Producer ids kept in memory across all partitions", value=total_pids)

    ends = {(r.topic, r.partition): r.log_end for r in snap.partitions}
    group_lag = gauge("kafka_consumergroup_lag", "Log end offset minus the group's committed offset",
                      ["consumergroup", "topic", "partition"])
    group_offset = gauge("kafka_consumergroup_current_offset", "The group's committed offset",
                         ["consumergroup", "topic", "partition"])
    for i, (group, topic, partition, offset) in enumerate(snap.committed):
        if pause is not None and i and i % RENDER_PAUSE_ROWS == 0:
            pause()
        lv = [group, topic, str(partition)]
        group_offset.add_metric(lv, offset)
        e = ends.get((topic, partition))
        if e is not None:
            group_lag.add_metric(lv, lag(e, offset))
    yield group_offset
    yield group_lag
    yield from group_families(snap, ends, pause)

    yield GaugeMetricFamily("kafka_coordinator_transaction_open", "Open transactions (Ongoing or being ended)",
                            value=len(open_starts := snap.open_txn_starts()))
    oldest = (now_ms - min(open_starts)) / 1000 if open_starts else 0.0
    yield GaugeMetricFamily("kafka_coordinator_transaction_oldest_open_age_seconds",
                            "Age of the oldest open transaction (0: none open)", value=max(oldest, 0.0))
    outcomes = CounterMetricFamily("kafka_coordinator_transaction_completed",
                                   "Transactions ended since start, by outcome", labels=["outcome"])
    outcomes.add_metric(["committed"], snap.txn_committed)
    outcomes.add_metric(["aborted"], snap.txn_aborted)
    outcomes.add_metric(["timed_out"], snap.txn_timed_out)
    yield outcomes
    conns = gauge("kafka_server_socketservermetrics_connection_count", "Open client connections, by listener",
                  ["listener"])
    for name, count in snap.connections.items():
        conns.add_metric([name], count)
    yield conns
    if snap.diskless is not None:
        yield from diskless_families(snap.diskless)


def diskless_families(c: dict[str, float]) -> Iterator[Any]:
    """The diskless parts' families (pure; issue 29, docs/DISKLESS.md): object-store requests
    by kind (every attempt: what a cloud store bills), bytes each way, retries; the read
    cache's hits, misses and size; the object writer's objects, commits and batches; damaged
    batches found by reads."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    reqs = CounterMetricFamily("oncelog_diskless_object_requests", "Object-store requests sent, by kind "
                               "(every attempt, retries included)", labels=["request"])
    for key in sorted(k for k in c if k.startswith("requests_")):
        reqs.add_metric([key[len("requests_"):]], c[key])
    yield reqs
    nbytes = CounterMetricFamily("oncelog_diskless_object_bytes", "Bytes uploaded by PUTs and downloaded by GETs",
                                 labels=["direction"])
    nbytes.add_metric(["put"], c.get("put_bytes", 0))
    nbytes.add_metric(["get"], c.get("get_bytes", 0))
    yield nbytes
    yield CounterMetricFamily("oncelog_diskless_object_retries", "Object-store attempts retried after a "
                              "transient failure", value=c.get("retries", 0))
    lookups = CounterMetricFamily("oncelog_diskless_cache_lookups", "Read-cache lookups of a batch, by result",
                                  labels=["result"])
    lookups.add_metric(["hit"], c.get("cache_hits", 0))
    lookups.add_metric(["miss"], c.get("cache_misses", 0))
    yield lookups
    yield GaugeMetricFamily("oncelog_diskless_cache_bytes", "Bytes in the read cache", value=c.get("cache_bytes", 0))
    yield CounterMetricFamily("oncelog_diskless_writer_objects", "Objects the writer uploaded",
                              value=c.get("objects", 0))
    yield CounterMetricFamily("oncelog_diskless_writer_commits", "Commits that wrote at least one batch",
                              value=c.get("commits", 0))
    yield CounterMetricFamily("oncelog_diskless_writer_batches", "Batches committed", value=c.get("batches", 0))
    phases = CounterMetricFamily("oncelog_diskless_writer_phase_seconds", "Where the writer's batches spent their "
                                 "time, summed over the batches of oncelog_diskless_writer_timed_batches_total, by "
                                 "phase: room (waiting for diskless.buffer.max.bytes), close (in the open object), "
                                 "upload, order (waiting for the previous object's commit), commit, complete",
                                 labels=["phase"])
    for key in sorted(k for k in c if k.startswith("phase_")):
        phases.add_metric([key[len("phase_"):]], c[key])
    yield phases
    yield CounterMetricFamily("oncelog_diskless_writer_timed_batches", "Batches the phase seconds are summed over "
                              "(those of objects that committed)", value=c.get("timed_batches", 0))
    damaged = CounterMetricFamily("oncelog_diskless_damaged_batches", "Batches a read found damaged and did not "
                                  "serve (CORRUPT_MESSAGE), by kind: missing (object or bucket gone), truncated "
                                  "(object cut short), corrupt (CRC32C, length or magic wrong); each check counts",
                                  labels=["kind"])
    for kind in ("missing", "truncated", "corrupt"):
        damaged.add_metric([kind], c.get(f"damaged_{kind}", 0))
    yield damaged


def group_families(snap: BrokerState, ends: dict[tuple[str, int], int],
                   pause: Callable[[], None] | None = None) -> Iterator[Any]:
    """The groups' families (pure): per group its type, state, members and epoch; per type the
    number of groups; per share partition (KIP-932) its offsets and record counts."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    glabels = ["consumergroup", "type"]
    count = GaugeMetricFamily("kafka_server_group_coordinator_metrics_group_count",
                              "Groups this broker coordinates, by protocol (classic, consumer, share)",
                              labels=["protocol"])
    members = GaugeMetricFamily("kafka_consumergroup_members", "Members of the group", labels=glabels)
    epoch = GaugeMetricFamily("kafka_consumergroup_epoch", "The group's generation (classic) or group epoch "
                              "(consumer, share)", labels=glabels)
    state = GaugeMetricFamily("kafka_consumergroup_state", "1 for the group's state (Kafka's names)",
                              labels=[*glabels, "state"])
    per_type = {"classic": 0, "consumer": 0, "share": 0}
    for i, g in enumerate(snap.groups):
        if pause is not None and i and i % RENDER_PAUSE_ROWS == 0:
            pause()
        per_type[g.group_type] = per_type.get(g.group_type, 0) + 1
        lv = [g.group_id, g.group_type]
        members.add_metric(lv, len(g.members))
        epoch.add_metric(lv, g.generation)
        state.add_metric([*lv, g.state], 1)
    for t, n in sorted(per_type.items()):
        count.add_metric([t], n)
    yield from (count, members, epoch, state)

    slabels = ["sharegroup", "topic", "partition"]
    start = GaugeMetricFamily("kafka_sharegroup_start_offset", "Share-partition start offset: every record "
                              "below it is acknowledged or archived (-1: not initialized)", labels=slabels)
    in_flight = GaugeMetricFamily("kafka_sharegroup_in_flight_records", "Records between the share-partition "
                                  "start and end offsets", labels=slabels)
    acquired = GaugeMetricFamily("kafka_sharegroup_acquired_records", "Records acquired by a member now "
                                 "(under an acquisition lock)", labels=slabels)
    share_lag = GaugeMetricFamily("kafka_sharegroup_lag", "Log end offset minus the share-partition start offset",
                                  labels=slabels)
    acked = CounterMetricFamily("kafka_sharegroup_acknowledged_records", "Records acknowledged (accepted) since "
                                "the share partition was loaded", labels=slabels)
    archived = CounterMetricFamily("kafka_sharegroup_archived_records", "Records archived (rejected, past the "
                                   "delivery count limit, never deliverable) since the share partition was "
                                   "loaded", labels=slabels)
    for i, sp in enumerate(snap.share_partitions):
        if pause is not None and i and i % RENDER_PAUSE_ROWS == 0:
            pause()
        lv = [sp.group_id, sp.topic, str(sp.partition)]
        start.add_metric(lv, sp.start_offset)
        in_flight.add_metric(lv, sp.in_flight)
        acquired.add_metric(lv, sp.acquired)
        acked.add_metric(lv, sp.acknowledged_total)
        archived.add_metric(lv, sp.archived_total)
        e = ends.get((sp.topic, sp.partition))
        if e is not None and sp.start_offset >= 0:
            share_lag.add_metric(lv, lag(e, sp.start_offset))
    yield from (start, in_flight, acquired, share_lag, acked, archived)


def metrics_for(broker: "ObservedBroker") -> BrokerMetrics | None:
    """The broker's metrics per its configuration: None when ``metrics.listen`` is unset.
    Raises InvalidConfig when prometheus_client is missing."""
    listen = broker.config.metrics_listen
    if listen is None:
        return None
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise InvalidConfig("metrics.listen is set but prometheus_client is not installed") from None
    host, port = parse_listen(listen)
    return BrokerMetrics(broker, host, port)
