"""The broker's CPU cost per Produce request, in process, without sockets (issue 7).

librdkafka sends one partition's batch per Produce request, so with many partitions the broker
handles many small requests and its fixed cost per request (decode, handler, append, response
encode) is what limits throughput. This script measures that cost alone: an in-process broker
on a temporary data dir, a pre-encoded Produce v9 request (one partition, one batch of
``--records`` records of ``--size`` bytes) dispatched ``--requests`` times round-robin over
``--partitions`` partitions. It prints microseconds per request and, with ``--profile``, the top
of a cProfile listing.

    python -m bench.request_path [--partitions 1000] [--records 110] [--size 100] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import pstats
import tempfile
import time
from pathlib import Path

from oncelog.broker.broker import Broker
from oncelog.broker.config import BrokerConfig
from oncelog.broker.dispatch import dispatch
from oncelog.protocol import apis, framing, records

PRODUCE_VERSION = 9


def produce_frames(topic: str, partitions: int, n_records: int, size: int) -> list[bytes]:
    """One encoded Produce request (without the size prefix) per partition."""
    m = apis.message_module_classes(apis.PRODUCE, PRODUCE_VERSION, False)
    batch = records.build_batch([(None, b"x" * size, [])] * n_records, timestamp_ms=int(time.time() * 1000))
    frames = []
    for p in range(partitions):
        body = m["ProduceRequest"](
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
            topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                m["PartitionProduceData"](index=p, records=batch),)),),
        )
        frames.append(framing.encode_request(apis.PRODUCE, PRODUCE_VERSION, p, "bench", body)[4:])
    return frames


async def measure(partitions: int, n_records: int, size: int, requests: int, profile: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="oncelog-reqpath-") as d:
        broker = Broker(BrokerConfig(data_dir=Path(d), port=0))
        await broker.start()
        try:
            broker.replicas.create_topic("t", partitions)
            frames = produce_frames("t", partitions, n_records, size)
            for f in frames:  # warm up: every partition has a segment and an index
                await dispatch(broker, f, "bench")
            prof = cProfile.Profile() if profile else None
            t0 = time.perf_counter()
            if prof:
                prof.enable()
            for i in range(requests):
                parts = await dispatch(broker, frames[i % partitions], "bench")
                assert parts is not None
            if prof:
                prof.disable()
            us = (time.perf_counter() - t0) / requests * 1e6
            if prof:
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            return us
        finally:
            await broker.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.request_path", description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=110)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    us = asyncio.run(measure(args.partitions, args.records, args.size, args.requests, args.profile))
    print(f"{us:.1f} us per Produce request ({args.records} x {args.size} B, {args.partitions} partitions)")


if __name__ == "__main__":
    main()
