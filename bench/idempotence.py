"""What idempotence costs: produce throughput with ``enable.idempotence`` on versus off.

Not a test: a measurement (issue 4; target: idempotence costs under 5% of throughput). Against
one ``oncelog broker`` process:

1. **Producer**: one confluent-kafka producer writes ``--records`` records of ``--size`` (100)
   bytes with acks=all into a fresh 4-partition topic per run, timed from the first
   ``produce()`` to the end of ``flush()``, after one first record has been acknowledged (so the
   one-time connection and producer-id set-up is reported apart). The two modes differ in
   ``enable.idempotence`` only: both use linger.ms=5, at most 5 requests in flight per
   connection (the idempotent producer's limit, so the plain one gets no pipelining advantage),
   the same batch and queue sizes, and delivery reports for errors only.
2. **Broker alone**: crafted Produce requests (a frame encoded once, then patched per request:
   base sequence or base timestamp, CRC), 5 in flight, so that the client does next to nothing
   and the figure is the broker's: idempotent batches are checked against and recorded in the
   producer state, plain ones are not.
3. **In process**: ``Partition.append`` alone (validation, producer-state check, log append,
   producer-state update) on idempotent and plain batches of the same size, alternating blocks
   of 200 batches: the broker-side cost of idempotence with no network and little noise.

Runs alternate between the modes (which goes first alternates too, so the load of other
processes falls on both alike); medians are reported, the median of the per-pair ratios, and
CPU time per record of the broker and of the producer process (psutil), which the machine's
load disturbs less than throughput. The load average is printed: on a shared machine, compare
runs taken at the same time only.

    .venv/bin/python bench/idempotence.py --records 500000 --repeat 7 [--markdown out.md]

Every wait is bounded; the broker is stopped on any exit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
from confluent_kafka import Producer

if not __package__:  # run as a script (bench/idempotence.py): make the bench package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.systems import create_topic_admin  # noqa: E402
from oncelog.client import ProtocolClient  # noqa: E402
from oncelog.process import BrokerProcess
from oncelog.protocol import apis, framing, records

PARTITIONS = 4
MODES = ("idempotence off", "idempotence on")


def create_topic(bootstrap: str, name: str) -> None:
    create_topic_admin(bootstrap, name, PARTITIONS)


def produce(bootstrap: str, topic: str, records: int, size: int, idempotent: bool) -> tuple[float, float]:
    """(records per second, seconds to the first acknowledgement of a new producer).

    The rate counts ``records`` records, all acknowledged (a complete ``flush()`` with no error
    report), from the first ``produce()`` to the end of ``flush()``, after one first record has
    been acknowledged."""
    p = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": idempotent,
        "acks": "all",
        "linger.ms": 5,
        "max.in.flight.requests.per.connection": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 200_000,
        "message.timeout.ms": 120_000,
        # Delivery reports for failures only: no Python callback per record in the measurement.
        "delivery.report.only.error": True,
    })
    payload = b"x" * size
    failed = 0

    def on_delivery(err, _msg) -> None:  # type: ignore[no-untyped-def]
        nonlocal failed
        if err is not None:
            failed += 1

    # Connect (and, when idempotent, get a producer id) before the clock starts: the steady
    # state is measured; the one-time start-up is reported separately.
    t0 = time.monotonic()
    p.produce(topic, payload, partition=0, on_delivery=on_delivery)
    if p.flush(30) or failed:
        raise RuntimeError(f"{topic}: the first record was not acknowledged")
    first_ack_s = time.monotonic() - t0
    start = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.001)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(180)
    elapsed = time.monotonic() - start
    if left or failed:
        raise RuntimeError(f"{topic}: {failed} failed, {left} pending of {records}")
    return records / elapsed, first_ack_s


def broker_alone(bootstrap: str, topic: str, requests: int, per_batch: int, size: int, idempotent: bool) -> float:
    """Records per second the broker takes from crafted Produce requests (acks=all, one batch of
    ``per_batch`` records per partition per request, up to 5 requests in flight): a measurement
    of the broker alone, the client doing next to nothing. One request frame is encoded once;
    each request is a copy with, in every batch, the base sequence (idempotent: consecutive
    sequences of a producer id from InitProducerId) or the base timestamp (plain) patched and
    the CRC recomputed, so both modes cost the client the same."""
    import datetime
    import struct

    import crc32c

    c = ProtocolClient(bootstrap, client_id="bench-idempotence")
    pid = epoch = -1
    if idempotent:
        v = c.version_for(apis.INIT_PRODUCER_ID)
        cls = c.classes(apis.INIT_PRODUCER_ID, v)["InitProducerIdRequest"]
        kw = {"transactional_id": None, "transaction_timeout": datetime.timedelta(seconds=60)}
        if v >= 3:
            kw.update(producer_id=-1, producer_epoch=-1)
        resp = c.request(apis.INIT_PRODUCER_ID, cls(**kw), version=v)
        pid, epoch = resp.producer_id, resp.producer_epoch
    v = c.version_for(apis.PRODUCE)
    m = c.classes(apis.PRODUCE, v)
    now = int(time.time() * 1000)
    batches = [
        records.build_batch([(None, bytes([65 + p]) * size, [])] * per_batch, timestamp_ms=now, producer_id=pid,
                            producer_epoch=epoch, base_sequence=0 if idempotent else -1)
        for p in range(PARTITIONS)
    ]
    body = m["ProduceRequest"](
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
        topic_data=(m["TopicProduceData"](name=topic, partition_data=tuple(
            m["PartitionProduceData"](index=p, records=b) for p, b in enumerate(batches))),),
    )
    template = framing.encode_request(apis.PRODUCE, v, 1, "bench-idempotence", body)
    starts = [template.index(b) for b in batches]
    blen = len(batches[0])
    # the patched field: baseSequence (int32 @53) or baseTimestamp (int64 @27, the CRC covers both)
    field_at, fmt = (53, ">i") if idempotent else (27, ">q")

    def frame(i: int) -> bytes:
        buf = bytearray(template)
        for at in starts:
            struct.pack_into(fmt, buf, at + field_at, i * per_batch if idempotent else now + i)
            struct.pack_into(">I", buf, at + 17, crc32c.crc32c(memoryview(buf)[at + 21 : at + blen]))
        return bytes(buf)

    answers = []
    window = 5
    start = time.monotonic()
    for i in range(min(window, requests)):
        c.send_raw(frame(i))
    for i in range(window, requests):
        answers.append(c.recv_frame())
        c.send_raw(frame(i))
    while len(answers) < requests:
        answers.append(c.recv_frame())
    elapsed = time.monotonic() - start
    c.close()
    for a in answers[:: max(1, requests // 50)] + answers[-1:]:
        _corr, resp = framing.decode_response(apis.PRODUCE, v, a)
        errors = {p.error_code for t in resp.responses for p in t.partition_responses}
        if errors != {0}:
            raise RuntimeError(f"{topic}: produce errors {errors}")
    return requests * PARTITIONS * per_batch / elapsed


def append_in_process(rounds: int, block: int, per_batch: int, size: int) -> dict[str, list[float]]:
    """µs per batch of ``Partition.append_validated`` (validation, producer-state check, log append,
    producer-state update) in this process, without any network: blocks of ``block`` batches,
    alternating between the modes ``rounds`` times, so that both see the same machine. Plain and
    idempotent batches are built in advance with the same size."""
    from oncelog.broker.partitions.partition import Partition
    from oncelog.storage.config import LogConfig
    from oncelog.types import TopicPartition

    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-append-"))
    recs = [(None, b"x" * size, [])] * per_batch
    now = int(time.time() * 1000)
    n = rounds * block
    batches = {
        "idempotence off": [records.build_batch(recs, timestamp_ms=now + i) for i in range(n)],
        "idempotence on": [records.build_batch(recs, timestamp_ms=now, producer_id=1000, producer_epoch=0,
                                               base_sequence=i * per_batch) for i in range(n)],
    }
    parts = {m: Partition.open(TopicPartition(f"append-{i}", 0), work / f"append-{i}-0", LogConfig(), now)
             for i, m in enumerate(MODES)}
    out: dict[str, list[float]] = {m: [] for m in MODES}
    limit = LogConfig().max_message_bytes

    async def blocks() -> None:
        for r in range(rounds):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                part, todo = parts[mode], batches[mode][r * block : (r + 1) * block]
                t0 = time.perf_counter()
                for b in todo:
                    await part.append_validated(b, records.validate_produce_batch(b, limit), now)
                out[mode].append((time.perf_counter() - t0) / block * 1e6)

    try:
        asyncio.run(blocks())
    finally:
        for part in parts.values():
            part.close()
    return out


def _pair_cost(rows: dict[str, list[float]]) -> tuple[float, float, float]:
    """Cost of idempotence from paired runs (one of each mode, back to back): the median and the
    quartiles of 1 - on/off. Pairing makes it less sensitive to the slow drifts of a shared
    machine's load than the ratio of the medians."""
    costs = sorted(1 - a / b for a, b in zip(rows["idempotence on"], rows["idempotence off"]))
    if len(costs) < 2:
        return costs[0], costs[0], costs[0]
    q1, _q2, q3 = statistics.quantiles(costs, n=4)
    return statistics.median(costs), q1, q3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--raw-requests", type=int, default=3000, help="requests per broker-alone run")
    ap.add_argument("--raw-batch", type=int, default=250, help="records per batch in broker-alone runs")
    ap.add_argument("--append-rounds", type=int, default=40, help="alternations of the in-process append measurement")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-idem-"))
    broker = BrokerProcess(work / "data", log_path=work / "broker.log")
    broker.start()
    assert broker.pid is not None
    proc = psutil.Process(broker.pid)
    me = psutil.Process()
    rows: dict[str, list[float]] = {m: [] for m in MODES}
    startup: dict[str, list[float]] = {m: [] for m in MODES}
    broker_cpu: dict[str, list[float]] = {m: [] for m in MODES}  # broker CPU µs per record
    client_cpu: dict[str, list[float]] = {m: [] for m in MODES}  # producer process CPU µs per record
    raw: dict[str, list[float]] = {m: [] for m in MODES}  # broker alone: records/s
    raw_cpu: dict[str, list[float]] = {m: [] for m in MODES}
    load_before = os.getloadavg()[0]
    try:
        # One unmeasured warm-up run per mode (imports, page cache, first segment files).
        for mode in MODES:
            create_topic(broker.bootstrap, f"warm-{mode[-2:].strip()}")
            produce(broker.bootstrap, f"warm-{mode[-2:].strip()}", min(args.records, 50_000), args.size, mode.endswith("on"))
        for r in range(args.repeat):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                topic = f"idem-{'on' if mode.endswith('on') else 'off'}-{r}"
                create_topic(broker.bootstrap, topic)
                c0, m0 = proc.cpu_times(), me.cpu_times()
                rate, first = produce(broker.bootstrap, topic, args.records, args.size, mode.endswith("on"))
                c1, m1 = proc.cpu_times(), me.cpu_times()
                cpu_us = (c1.user + c1.system - c0.user - c0.system) / args.records * 1e6
                my_us = (m1.user + m1.system - m0.user - m0.system) / args.records * 1e6
                rows[mode].append(rate)
                startup[mode].append(first)
                broker_cpu[mode].append(cpu_us)
                client_cpu[mode].append(my_us)
                print(f"run {r} {mode:16s} {rate:12,.0f} records/s   CPU µs/record: broker {cpu_us:5.2f}, "
                      f"producer {my_us:5.2f}   first ack after {first * 1000:5.0f} ms", flush=True)
        for r in range(args.repeat):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                topic = f"raw-{'on' if mode.endswith('on') else 'off'}-{r}"
                create_topic(broker.bootstrap, topic)
                c0 = proc.cpu_times()
                rate = broker_alone(broker.bootstrap, topic, args.raw_requests, args.raw_batch, args.size,
                                    mode.endswith("on"))
                c1 = proc.cpu_times()
                cpu_us = (c1.user + c1.system - c0.user - c0.system) / (args.raw_requests * PARTITIONS * args.raw_batch) * 1e6
                raw[mode].append(rate)
                raw_cpu[mode].append(cpu_us)
                print(f"broker alone run {r} {mode:16s} {rate:12,.0f} records/s   broker CPU {cpu_us:5.2f} µs/record",
                      flush=True)
    finally:
        broker.stop()
    inproc = append_in_process(args.append_rounds, 200, args.raw_batch, args.size)
    load_after = os.getloadavg()[0]
    med = {k: statistics.median(v) for k, v in rows.items()}
    cost = 1 - med["idempotence on"] / med["idempotence off"]
    # Runs are paired (one of each mode, back to back): the median of the per-pair ratios is
    # less sensitive to slow drifts of the machine's load than the ratio of the medians.
    pair_cost, pair_q1, pair_q3 = _pair_cost(rows)
    raw_cost = _pair_cost(raw)
    bcpu = {k: statistics.median(v) for k, v in broker_cpu.items()}
    ccpu = {k: statistics.median(v) for k, v in client_cpu.items()}
    lines = [
        f"Load average (1 min) {load_before:.1f} before, {load_after:.1f} after, on {os.cpu_count()} CPUs.",
        "",
        f"| producer ({args.records:,} × {args.size} B records, {PARTITIONS} partitions, acks=all) "
        f"| median records/s | median MB/s | CPU µs/record: broker | producer | runs (records/s) |",
        "|---|---:|---:|---:|---:|---|",
        *(
            f"| {k} | {med[k]:,.0f} | {med[k] * args.size / 1e6:.1f} | {bcpu[k]:.2f} | {ccpu[k]:.2f} "
            f"| {', '.join(f'{x:,.0f}' for x in v)} |"
            for k, v in rows.items()
        ),
        "",
        f"Idempotence costs **{cost:.1%}** of produce throughput (ratio of the medians of {args.repeat} runs "
        f"each; median of the per-pair ratios: {pair_cost:.1%}, interquartile range {pair_q1:.1%} .. {pair_q3:.1%}; "
        f"target: under 5%). CPU per record: broker "
        f"{bcpu['idempotence on'] / bcpu['idempotence off'] - 1:+.1%}, producer "
        f"{ccpu['idempotence on'] / ccpu['idempotence off'] - 1:+.1%}.",
        "",
        f"| broker alone (crafted Produce requests, {args.raw_requests} × {PARTITIONS} batches of "
        f"{args.raw_batch} × {args.size} B, 5 in flight) | median records/s | broker CPU µs/record | runs (records/s) |",
        "|---|---:|---:|---|",
        *(
            f"| {k} | {statistics.median(v):,.0f} | {statistics.median(raw_cpu[k]):.2f} "
            f"| {', '.join(f'{x:,.0f}' for x in v)} |"
            for k, v in raw.items()
        ),
        "",
        f"Broker alone, idempotence costs **{1 - statistics.median(raw['idempotence on']) / statistics.median(raw['idempotence off']):.1%}** "
        f"of throughput (median of the per-pair ratios: {raw_cost[0]:.1%}, interquartile range "
        f"{raw_cost[1]:.1%} .. {raw_cost[2]:.1%}); "
        f"broker CPU per record {statistics.median(raw_cpu['idempotence on']) / statistics.median(raw_cpu['idempotence off']) - 1:+.1%}.",
        "",
        f"In process, `Partition.append` of a {args.raw_batch}-record batch takes "
        + ", ".join(f"{k}: {statistics.median(v):.1f} µs" for k, v in inproc.items())
        + f" (medians of {args.append_rounds} alternating blocks of 200 batches; median of the per-pair "
        f"ratios: idempotence costs {_pair_cost({k: [1 / x for x in v] for k, v in inproc.items()})[0]:.1%} "
        f"of append throughput).",
        "",
        "Time from creating a producer to its first acknowledgement (median): "
        + ", ".join(f"{k}: {statistics.median(v) * 1000:.0f} ms" for k, v in startup.items()) + ".",
    ]
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
