"""The demo's Spark job: orders joined with their inventory reservations into shipments, exactly
once (R25). ``make demo`` (``oncelog_tools.demo``) runs it as a child process, kills it and restarts it.

    python -m oncelog_tools.demo.pipeline --bootstrap 127.0.0.1:9092 --checkpoint DIR [--master 'local[2,4]']

Input, as the demo's generator writes it — one transaction per group of orders, each order and
its reservation in the same transaction, keyed by order id:

- ``orders``: ``{"order_id", "customer", "sku", "qty", "unit_price_cents"}``
- ``inventory``: ``{"order_id", "sku", "reserved", "warehouse"}``

Output, through the exactly-once sink (``topic`` column):

- ``shipments`` for an order whose reservation covers it (same sku, ``reserved >= qty``):
  ``{"order_id", "customer", "sku", "qty", "warehouse", "amount_cents", "status": "ready"}``
- ``rejects`` otherwise: ``{"order_id", "sku", "qty", "reserved", "reason"}``

**Why a stream-stream join and not a join inside each micro-batch.** An order and its
reservation commit atomically, but atomic is not "in the same micro-batch": the source fixes a
batch's end per partition from the partitions' last stable offsets, asked at one moment, while
a transaction's markers reach the partitions one after the other, and ``maxOffsetsPerTrigger``
cuts each partition's range independently. So an order can be in batch 7 and its reservation in
batch 8. Spark's stream-stream inner join keeps each side's unmatched rows in its state store
(checkpointed per batch, versioned by batch id) and emits a pair in the batch where its second
half arrives — once. Event-time watermarks on both sides (the records' CreateTime) and a time
bound in the join condition let Spark drop state older than ``WATERMARK``; both halves of an
order are written within milliseconds, so only a pipeline lagging by more than that would miss
a pair.

**Why the output is exactly once.** A re-executed micro-batch (after a driver kill) starts from
the state of the previous batch and the same input offsets, so each shuffle partition — one
sink task — produces the same rows, which the sink writes once (``exactly_once``). The sink's
transactions never contain the input offsets here (the join's shuffle separates reading from
writing): Spark's checkpoint is the record of input progress.

The job prints one JSON line per finished micro-batch on stdout (``{"batch", "rows", ...}``),
which the demo reads; SIGTERM stops the query and exits 0.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

ORDER_SCHEMA = "order_id LONG, customer STRING, sku STRING, qty INT, unit_price_cents LONG"
RESERVATION_SCHEMA = "order_id LONG, sku STRING, reserved INT, warehouse STRING"
#: How late (event time) a half of an order may arrive after the newest record seen.
WATERMARK = "2 minutes"


def build(spark: Any, bootstrap: str, *, max_offsets: int, fetch_retries: int) -> Any:
    """The streaming DataFrame of sink rows (``topic``, ``key``, ``value``)."""

    def read(topic: str) -> Any:
        return (
            spark.readStream.format("oncelog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(max_offsets))
            .option("fetchOffset.numRetries", str(fetch_retries))
            .option("groupIdForLag", "demo-pipeline")
            .load()
        )

    orders = read("orders").selectExpr(
        f"from_json(cast(value as string), '{ORDER_SCHEMA}') as o", "timestamp as o_ts"
    ).select("o.*", "o_ts").withWatermark("o_ts", WATERMARK)
    reservations = read("inventory").selectExpr(
        f"from_json(cast(value as string), '{RESERVATION_SCHEMA}') as r", "timestamp as r_ts"
    ).selectExpr(
        "r.order_id as r_order_id", "r.sku as r_sku", "r.reserved", "r.warehouse", "r_ts"
    ).withWatermark("r_ts", WATERMARK)
    from pyspark.sql.functions import expr

    joined = orders.join(
        reservations,
        expr(f"order_id = r_order_id AND r_ts BETWEEN o_ts - interval {WATERMARK} AND o_ts + interval {WATERMARK}"),
    )
    return joined.selectExpr(
        "CASE WHEN r_sku = sku AND reserved >= qty THEN 'shipments' ELSE 'rejects' END as topic",
        "cast(order_id as string) as key",
        """CASE WHEN r_sku = sku AND reserved >= qty
             THEN to_json(named_struct('order_id', order_id, 'customer', customer, 'sku', sku, 'qty', qty,
                  'warehouse', warehouse, 'amount_cents', qty * unit_price_cents, 'status', 'ready'))
             ELSE to_json(named_struct('order_id', order_id, 'sku', sku, 'qty', qty, 'reserved', reserved,
                  'reason', CASE WHEN r_sku <> sku THEN 'sku mismatch' ELSE 'insufficient stock' END))
           END as value""",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description="orders + inventory -> shipments, exactly once")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--master", default="local[2,4]")
    ap.add_argument("--max-offsets", type=int, default=4000)
    ap.add_argument("--trigger", default="1 second")
    args = ap.parse_args()

    from oncelog_tools.spark.session import loopback_session

    spark = loopback_session(args.master, "oncelog-demo-pipeline", log_level="WARN")
    q = (
        build(spark, args.bootstrap, max_offsets=args.max_offsets, fetch_retries=30)
        .writeStream.format("oncelog")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("delivery.guarantee", "exactly_once")
        .option("transactionalIdPrefix", "demo-shipments")
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=args.trigger)
        .queryName("shipments")
        .start()
    )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print(json.dumps({"started": str(q.id), "run": str(q.runId)}), flush=True)
    last = None
    while q.isActive and not stopping:
        time.sleep(0.5)
        p = q.lastProgress
        if p and p["batchId"] != last:
            last = p["batchId"]
            print(json.dumps({"batch": last, "rows": p["numInputRows"], "ms": p["durationMs"].get("triggerExecution")}), flush=True)
    if stopping:
        q.stop()
        spark.stop()
        return 0
    exc = q.exception()
    print(json.dumps({"failed": str(exc)[:2000]}), flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
