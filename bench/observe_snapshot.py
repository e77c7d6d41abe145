"""What one snapshot of broker state costs the event loop (issue 27: one observer), in process.

An in-process broker on a temporary data dir with ``--partitions`` partitions (topics of 100)
and the group and transaction coordinators started; then the snapshot that /metrics and the
console read is taken ``--rounds`` times. Printed: milliseconds per snapshot (wall, all chunks)
and how long it held the loop, for each snapshot function the checkout has:

* after issue 27: ``oncelog.broker.observability.observe.take`` (one snapshot for both);
* before: ``oncelog.broker.observability.metrics.take_snapshot`` (the metrics' own) and
  ``oncelog.console.snapshot.take`` (the console's own, one pass without yielding).

Run it once per checkout on the same machine, e.g.::

    PYTHONPATH=/tmp/base/src python bench/observe_snapshot.py   # before
    PYTHONPATH=src python bench/observe_snapshot.py             # after
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import tempfile
import time
from pathlib import Path

from oncelog.broker.broker import Broker
from oncelog.broker.configuration.config import BrokerConfig


async def measure(partitions: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="oncelog-observe-") as d:
        broker = Broker(BrokerConfig(data_dir=Path(d), port=0))
        await broker.start()
        try:
            for t in range(partitions // 100):
                broker.replicas.create_topic(f"t{t}", 100)
            total = len(broker.replicas.partitions)
            takers = {}
            try:
                observe = importlib.import_module("oncelog.broker.observability.observe")
                takers["observe.take (metrics and console)"] = lambda: observe.take(broker)
            except ImportError:
                from oncelog.broker.observability import metrics
                from oncelog.console import snapshot

                async def console_take() -> object:
                    return snapshot.take(broker)

                takers["metrics.take_snapshot"] = lambda: metrics.take_snapshot(broker)
                takers["console.snapshot.take"] = console_take
            for name, take in takers.items():
                await take()  # warm
                walls, held = [], []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    snap = await take()
                    walls.append((time.perf_counter() - t0) * 1000)
                    held.append(getattr(snap, "loop_s", None) or getattr(snap, "took_ms", 0) / 1000)
                print(f"{name:40s} {total} partitions: wall {statistics.median(walls):7.2f} ms, "
                      f"held the loop {statistics.median(held) * 1000:7.2f} ms (median of {rounds})")
        finally:
            await broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    asyncio.run(measure(args.partitions, args.rounds))


if __name__ == "__main__":
    main()
