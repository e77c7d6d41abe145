"""A Spark driver in its own process, for tests that SIGKILL it: ``in`` → map → ``out`` with the
exactly-once sink, restartable from ``--checkpoint``.

    python tests/spark/eos_driver.py --bootstrap 127.0.0.1:9092 --checkpoint DIR \\
        [--master 'local[2,3]'] [--trigger continuous|available_now] [--faults SPEC --fault-dir DIR]
        [--sink-option key=value ...]

``available_now`` runs what is there and exits 0; ``continuous`` runs micro-batches as data
arrives until ``--timeout`` (exit 3) or until it is killed. A failed query exits 1. It prints
``query started <id>`` once the query runs.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--trigger", choices=("continuous", "available_now"), default="available_now")
    ap.add_argument("--max-offsets", default="300")
    ap.add_argument("--faults", default="")
    ap.add_argument("--fault-dir", default="")
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--sink-option", action="append", default=[], help="key=value, passed to the sink")
    args = ap.parse_args()

    import os

    from oncelog.spark import faults
    from oncelog_tools.spark.session import loopback_session

    if args.faults:  # armed before Spark starts: its JVM and Python workers inherit the variable
        spec_file = os.path.join(args.fault_dir, "armed")
        faults.arm(spec_file, args.faults, args.fault_dir)
        os.environ[faults.ENV] = spec_file
    spark = loopback_session(args.master, "oncelog-eos-driver")
    df = (
        spark.readStream.format("oncelog")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets)
        .load()
        .selectExpr("key", "concat(value, cast('!' as binary)) as value")
    )
    w = (
        df.writeStream.format("oncelog")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", "out")
        .option("checkpointLocation", args.checkpoint)  # exactly once: the default
    )
    for kv in args.sink_option:
        key, _, value = kv.partition("=")
        w = w.option(key, value)
    if args.trigger == "available_now":
        w = w.trigger(availableNow=True)
    q = w.start()
    print(f"query started {q.id}", flush=True)
    try:
        finished = q.awaitTermination(args.timeout)
    except Exception as exc:  # StreamingQueryException: the query failed
        print(f"query failed: {exc}", flush=True)
        return 1
    if not finished:
        print("timeout", flush=True)
        q.stop()
        return 3
    print("query finished", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
