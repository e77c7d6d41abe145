"""The broker's cost per Produce and per Fetch request, in process, without sockets (issues 7, 27).

librdkafka sends one partition's batch per Produce request, so with many partitions the broker
handles many small requests and its fixed cost per request (decode, handler, append, response
encode) is what limits throughput. This script measures that cost alone: an in-process broker
on a temporary data dir, pre-encoded requests handed to the broker's own dispatcher (the one
callable its server knows) ``--requests`` times, round-robin over ``--partitions`` partitions:

- Produce v9: one partition, one batch of ``--records`` records of ``--size`` bytes;
- Fetch v12: one partition from offset 0, up to 1 MiB (the file ranges are built, not sent).

``--engine embedded`` (the default) runs the embedded broker on local files; ``--engine
cluster`` starts a real PostgreSQL server in a temporary directory (oncelog.testing.pgserver;
as an unprivileged user when run as root) and one broker in cluster mode on it. In cluster mode
a Produce is answered after its group COMMIT, so requests are dispatched ``--concurrency`` at a
time (the broker pipelines a connection's Produce requests the same way, issue 28); the figure
is then the process's CPU time per request (event loop and committer threads) next to the wall
time. For the embedded engine both are given too.

    python -m bench.request_path [--engine embedded|cluster|both] [--partitions 1000]
        [--records 110] [--size 100] [--requests 20000] [--profile]

Use it before and after a change to the request path, in one run on one machine (issue 27).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import datetime
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

from oncelog.broker.broker import Broker
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.context import Client
from oncelog.protocol import apis, framing, messages, records

PRODUCE_VERSION = 9
FETCH_VERSION = 12
TOPIC = "t"


def produce_frames(topic: str, partitions: int, n_records: int, size: int) -> list[bytes]:
    """One encoded Produce request (without the size prefix) per partition."""
    m = messages.Builder(apis.PRODUCE, PRODUCE_VERSION, response=False)
    batch = records.build_batch([(None, b"x" * size, [])] * n_records, timestamp_ms=int(time.time() * 1000))
    frames = []
    for p in range(partitions):
        body = m.ProduceRequest(
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
            topic_data=(m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=p, records=batch),)),),
        )
        frames.append(framing.encode_request(apis.PRODUCE, PRODUCE_VERSION, p, "bench", body)[4:])
    return frames


def fetch_frames(topic: str, partitions: int) -> list[bytes]:
    """One encoded Fetch request per partition, from offset 0, without waiting."""
    m = messages.Builder(apis.FETCH, FETCH_VERSION, response=False)
    frames = []
    for p in range(partitions):
        body = m.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
            topics=(m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
                partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20),)),),
        )
        frames.append(framing.encode_request(apis.FETCH, FETCH_VERSION, p, "bench", body)[4:])
    return frames


def create_topic_frame(topic: str, partitions: int) -> bytes:
    m = messages.Builder(apis.CREATE_TOPICS, 5, response=False)
    body = m.CreateTopicsRequest(
        topics=(m.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1, assignments=(),
                                 configs=()),),
        timeout=datetime.timedelta(seconds=30), validate_only=False)
    return framing.encode_request(apis.CREATE_TOPICS, 5, 0, "bench", body)[4:]


@contextlib.contextmanager
def _store(engine: str) -> Iterator[str | None]:
    """None for the embedded engine; a fresh database's URL on a real PostgreSQL for cluster."""
    if engine == "embedded":
        yield None
        return
    from oncelog.testing.pgserver import PgServer

    with PgServer() as pg:
        yield pg.create_database("bench_request_path")


@contextlib.asynccontextmanager
async def _broker(engine: str, partitions: int) -> AsyncIterator[Broker]:
    with tempfile.TemporaryDirectory(prefix="oncelog-reqpath-") as d, _store(engine) as store:
        broker = Broker(BrokerConfig(data_dir=Path(d), port=0), store=store)
        await broker.start()
        try:
            client = Client("bench:0", asyncio.get_running_loop().create_future())
            await broker.dispatcher.handle(create_topic_frame(TOPIC, partitions), client)
            yield broker
        finally:
            await broker.stop()


def _produce_codes(parts: list[Any] | None) -> set[int]:
    """The error codes of a Produce answer (its parts are bytes, size prefix first)."""
    _, resp = framing.decode_response(apis.PRODUCE, PRODUCE_VERSION, b"".join(parts or ())[4:])
    return {p.error_code for t in resp.responses for p in t.partition_responses}


async def _warm_up(broker: Broker, client: Client, frames: list[bytes], deadline_s: float = 60.0) -> None:
    """Every partition takes one batch (a segment and an index exist; in cluster mode the
    broker leads it), retried until it is accepted or the deadline passes."""
    end = time.monotonic() + deadline_s
    for f in frames:
        while True:
            codes = _produce_codes(await broker.dispatcher.handle(f, client))
            if codes == {0}:
                break
            if time.monotonic() > end:
                raise RuntimeError(f"warm-up produce still refused after {deadline_s:.0f} s: {codes}")
            await asyncio.sleep(0.2)


async def _run(broker: Broker, client: Client, frames: list[bytes], requests: int, concurrency: int,
               profile: bool, label: str) -> tuple[float, float]:
    """(wall µs, process CPU µs) per request for ``requests`` dispatches of ``frames``."""
    handle = broker.dispatcher.handle
    prof = cProfile.Profile() if profile else None
    n = len(frames)
    w0, c0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    if concurrency <= 1:
        for i in range(requests):
            assert await handle(frames[i % n], client) is not None
    else:
        for start in range(0, requests, concurrency):
            outs = await asyncio.gather(*(handle(frames[i % n], client)
                                          for i in range(start, min(start + concurrency, requests))))
            assert all(o is not None for o in outs)
    if prof:
        prof.disable()
        print(f"--- profile: {label}")
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return ((time.perf_counter() - w0) / requests * 1e6, (time.process_time() - c0) / requests * 1e6)


async def measure(engine: str, partitions: int, n_records: int, size: int, requests: int, concurrency: int,
                  profile: bool) -> dict[str, tuple[float, float]]:
    """{"produce": (wall µs, CPU µs), "fetch": (...)} per request."""
    async with _broker(engine, partitions) as broker:
        client = Client("bench:0", asyncio.get_running_loop().create_future())
        produce = produce_frames(TOPIC, partitions, n_records, size)
        await _warm_up(broker, client, produce)
        conc = concurrency if engine == "cluster" else 1
        out = {"produce": await _run(broker, client, produce, requests, conc, profile, f"{engine} produce")}
        out["fetch"] = await _run(broker, client, fetch_frames(TOPIC, partitions), requests, 1, profile,
                                  f"{engine} fetch")
        return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.request_path", description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("embedded", "cluster", "both"), default="embedded")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=110)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=64, help="cluster engine: Produce requests in flight")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    engines = ("embedded", "cluster") if args.engine == "both" else (args.engine,)
    print(f"{args.records} x {args.size} B per Produce, {args.partitions} partitions, {args.requests} requests each")
    print(f"{'engine':<9} {'api':<8} {'wall us/req':>12} {'CPU us/req':>11}")
    for engine in engines:
        res = asyncio.run(measure(engine, args.partitions, args.records, args.size, args.requests,
                                  args.concurrency, args.profile))
        for api, (wall, cpu) in res.items():
            print(f"{engine:<9} {api:<8} {wall:>12.1f} {cpu:>11.1f}")


if __name__ == "__main__":
    main()
