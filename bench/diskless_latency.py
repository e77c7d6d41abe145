"""``python -m bench.diskless_latency [--brokers 1] [--intervals 50 250] [--clients confluent kafka-python aiokafka]
[--rate 500] [--size 1024] [--seconds 10] [--settings default|recommended] [--conf KEY=VALUE] [--embedded]
[--put-delay-ms LO HI] [--baseline DIR] [--json FILE]``

Where a diskless record's time goes (docs/DISKLESS.md §1.7). One PostgreSQL server
(``oncelog.testing.pgserver``, fsync on) and one SeaweedFS (``oncelog.testing.seaweedfs``); per
configuration (cluster size B, ``diskless.commit.interval.ms``, client) B fresh ``oncelog broker
--store …`` processes on a fresh database, each with ``metrics.listen``, and a diskless topic of 6
partitions (their leaders spread over the brokers). Two client processes run alone on them:

* one idempotent producer at ``--rate`` records/s of ``--size`` bytes, round-robin over the
  partitions: confluent-kafka (librdkafka), kafka-python or aiokafka. ``--settings default``:
  the client's defaults but idempotence; ``recommended``: the settings docs/DISKLESS.md
  recommends for diskless topics (``RECOMMENDED``); ``--conf``: more settings on top. Each value carries its
  sequence number and send time (``time.time()``); the producer notes when each record's
  acknowledgement arrived (its delivery report / future) and its own CPU time over the window
  (librdkafka's ``rdk:broker`` threads apart);
* one confluent-kafka read_committed consumer of every partition, noting when each record
  arrives.

Reported per configuration: produce latency (send → acknowledgement), end-to-end latency (send
→ arrival at the consumer) and visibility (acknowledgement → arrival: how long after its producer
was told a record is durable a read_committed consumer has it), each p50 / p99 in ms; delivery
errors; the producer's CPU per record; and the breakdown of a record's time, in mean ms per
batch: from the brokers' /metrics, the object writer's phases
(``oncelog_diskless_writer_phase_seconds_total``: close = in the open object until it closed,
upload, order = waiting for the previous object's commit, commit, complete) and the Produce
request's time at the broker (arrival → encoded answer); "client" is the mean produce latency
less that (the record waiting in the client for its partition's request in flight, linger, the
network). ``--embedded``: also the same client against one embedded broker (no store: the
reference for client CPU per record). ``--put-delay-ms``: every PUT delayed through the S3
fault proxy (a store slower than loopback). ``--baseline DIR``: each configuration is run first with the
brokers of that source tree (``git archive COMMIT src | tar -x -C DIR``, with the compiled
``_recordwalk`` copied in): before and after, alternating, on the same machine.

Run by hand; the numbers go to docs/DISKLESS.md with the machine's load (printed).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import struct
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from bench.cluster_scale import _rdk_cpu
from bench.common import drop_database, pg_and_workdir, stop_brokers

PARTITIONS = int(os.environ.get("ONCELOG_BENCH_PARTITIONS", 6))  # (the spawned clients read it too)
LATENCY_RECORD = 1024  # bytes of a record (``--size``'s default)
TOPIC = "lat"
_HEAD = struct.Struct("<qd")  # sequence number, send time

#: docs/DISKLESS.md "Client settings": the client's settings for diskless topics (per client;
#: ``{interval}``: diskless.commit.interval.ms). librdkafka: linger.ms at the interval stops its
#: broker thread polling without sleeping while a partition's request waits for its object (the
#: batch is not "due" before the answer comes); kafka-python and aiokafka: batches large enough
#: for a partition's records of two intervals (they send one batch per partition per request).
RECOMMENDED: dict[str, dict[str, Any]] = {
    "confluent": {"linger.ms": "{interval}"},
    "kafka-python": {"linger_ms": 5, "batch_size": 1 << 20},
    "aiokafka": {"linger_ms": 5, "max_batch_size": 1 << 20},
}


def settings(client: str, which: str, interval_ms: int | None, extra: dict[str, str] | None = None) -> dict[str, Any]:
    """The producer settings of ``client`` besides idempotence (``which``: default, recommended),
    then ``extra`` (``--conf``: values may use ``{interval}``; numbers become ints)."""
    out: dict[str, Any] = {}
    for k, v in ({} if which == "default" else RECOMMENDED[client]).items():
        out[k] = int(v.format(interval=interval_ms or 5)) if isinstance(v, str) else v
    for k, v in (extra or {}).items():
        v = v.format(interval=interval_ms or 5)
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


# -- the client processes (spawned: librdkafka must not cross a fork) ------------------------------

def _cpu_self() -> tuple[float, float]:
    """(CPU seconds of this process, of its librdkafka broker threads) so far."""
    t = os.times()
    return t.user + t.system, _rdk_cpu()


def _value(seq: int, size: int, sent_at: dict[int, float]) -> bytes:
    """The record's value (its sequence number and send time first), noting the send time."""
    t = sent_at[seq] = time.time()
    return _HEAD.pack(seq, t) + b"x" * max(0, size - _HEAD.size)


def _produce(client: str, bootstrap: str, conf: dict[str, Any], t_start: float, seconds: float, rate: int,
             size: int) -> dict:
    """Produce at ``rate`` from ``t_start`` for ``seconds``; returns per sequence number the
    acknowledgement time, the errors, the records sent and the CPU over the window."""
    acked: dict[int, float] = {}
    sent_at: dict[int, float] = {}
    errors: list[str] = []
    if client == "aiokafka":
        import asyncio

        return asyncio.run(_produce_aiokafka(bootstrap, conf, t_start, seconds, rate, size))
    if client == "confluent":
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **conf})

        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked[_HEAD.unpack_from(msg.value())[0]] = time.time()

        def send(seq: int) -> None:
            p.produce(TOPIC, _value(seq, size, sent_at), partition=seq % PARTITIONS, on_delivery=cb)
            p.poll(0)

        def wait(s: float) -> None:
            p.poll(s)

        def flush() -> int:
            return p.flush(120)
    else:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, **conf)

        def send(seq: int) -> None:
            fut = p.send(TOPIC, _value(seq, size, sent_at), partition=seq % PARTITIONS)
            fut.add_callback(lambda _md, s=seq: acked.__setitem__(s, time.time()))
            fut.add_errback(lambda e: errors.append(str(e)))

        def wait(s: float) -> None:
            time.sleep(s)

        def flush() -> int:
            p.flush(120)
            return 0
    try:
        send(-1)  # warm-up: connected, producer id, metadata
        if flush():
            raise TimeoutError("warm-up record not acknowledged")
        time.sleep(max(0.0, t_start - time.time()))
        c0 = _cpu_self()
        start = time.monotonic()
        n = 0
        while time.monotonic() < start + seconds:
            due = start + n / rate
            now = time.monotonic()
            if now < due:
                wait(min(due - now, 0.005))
                continue
            send(n)
            n += 1
        left = flush()
        c1 = _cpu_self()
    finally:
        if client == "kafka-python":
            p.close(10)
    acked.pop(-1, None)
    sent_at.pop(-1, None)
    return {"sent": n, "sent_at": sent_at, "acked": acked, "errors": errors[:5], "error_count": len(errors) + left,
            "cpu": c1[0] - c0[0], "rdk_cpu": c1[1] - c0[1]}


async def _produce_aiokafka(bootstrap: str, conf: dict[str, Any], t_start: float, seconds: float, rate: int,
                            size: int) -> dict:
    import asyncio

    from aiokafka import AIOKafkaProducer

    acked: dict[int, float] = {}
    sent_at: dict[int, float] = {}
    errors: list[str] = []
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, **conf)
    await p.start()
    pending: set[asyncio.Future] = set()

    def done(fut: asyncio.Future, seq: int) -> None:
        pending.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            errors.append(repr(fut.exception()) if not fut.cancelled() else "cancelled")
        else:
            acked[seq] = time.time()

    async def send(seq: int) -> None:
        fut = await p.send(TOPIC, _value(seq, size, sent_at), partition=seq % PARTITIONS)
        pending.add(fut)
        fut.add_done_callback(lambda f, s=seq: done(f, s))

    try:
        await send(-1)
        await asyncio.wait_for(asyncio.gather(*pending), 60)
        await asyncio.sleep(max(0.0, t_start - time.time()))
        c0 = _cpu_self()
        start = time.monotonic()
        n = 0
        while time.monotonic() < start + seconds:
            due = start + n / rate
            now = time.monotonic()
            if now < due:
                await asyncio.sleep(min(due - now, 0.005))
                continue
            await send(n)
            n += 1
        if pending:
            await asyncio.wait(set(pending), timeout=120)
        c1 = _cpu_self()
    finally:
        await p.stop()
    acked.pop(-1, None)
    sent_at.pop(-1, None)
    return {"sent": n, "sent_at": sent_at, "acked": acked, "errors": errors[:5], "error_count": len(errors),
            "cpu": c1[0] - c0[0],
            "rdk_cpu": 0.0}


def _consume(bootstrap: str, t_start: float, seconds: float) -> dict:
    """A read_committed consumer of every partition from the start: per sequence number, when it
    arrived (bounded: the window, then until 3 s without a record, 30 s at most)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 500, "fetch.min.bytes": 1})
    got: dict[int, float] = {}
    try:
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        last = time.time()
        while True:
            now = time.time()
            if now > t_start + seconds + 30 or (now > t_start + seconds and now - last > 3):
                break
            m = c.poll(0.2)  # returns at the first record
            if m is not None and m.error() is None:
                last = time.time()
                seq = _HEAD.unpack_from(m.value())[0]
                if seq >= 0:
                    got.setdefault(seq, last)
    finally:
        c.close()
    return {"arrived": got}


def _worker(kind: str, args: tuple, q: Any) -> None:
    try:
        q.put((kind, _produce(*args) if kind == "produce" else _consume(*args)))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the run
        q.put((kind, {"error": f"{type(exc).__name__}: {exc}"}))


# -- the brokers' counters --------------------------------------------------------------------------

def scrape(addresses: list[str]) -> dict[str, float]:
    """Summed over the brokers: the writer's phase seconds (``phase_close``, ...) and timed
    batches, batches committed, objects, and the Produce requests' count and seconds."""
    out: dict[str, float] = {}
    for addr in addresses:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=30) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            name, _, val = line.rpartition(" ")
            key = None
            if name.startswith("oncelog_diskless_writer_phase_seconds_total{"):
                key = "phase_" + name.split('"')[1]
            elif name in ("oncelog_diskless_writer_timed_batches_total", "oncelog_diskless_writer_batches_total",
                          "oncelog_diskless_writer_objects_total"):
                key = name[len("oncelog_diskless_writer_"):-len("_total")]
            elif name.startswith("kafka_network_requestmetrics_totaltime_seconds_") and 'request="Produce"' in name:
                key = {"count": "produce_count", "sum": "produce_seconds"}.get(name.split("{")[0].rsplit("_", 1)[1])
            if key is not None:
                out[key] = out.get(key, 0.0) + float(val)
    return out


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# -- one configuration ------------------------------------------------------------------------------

def measure(pg: Any, seaweed: Any, work: Path, brokers: int, interval_ms: int | None, client: str, which: str,
            rate: int, size: int, seconds: float, baseline: Path | None = None, settle: float = 4.0,
            endpoint: str | None = None, extra: dict[str, str] | None = None, diskless: bool = True) -> dict:
    """One configuration (``brokers`` 0: one embedded broker, no store, a plain topic); see the
    module docstring. ``endpoint``: the brokers' object-store endpoint (a fault proxy in front of
    ``seaweed`` that delays PUTs), else ``seaweed``'s. ``diskless`` False: a topic on the
    PostgreSQL engine (``interval_ms`` None)."""
    diskless = diskless and brokers > 0
    import psycopg  # noqa: F401 - the brokers' store needs it; fail here first

    from bench.systems import create_topic_admin, wait_leaders
    from oncelog.process import BrokerProcess, free_port

    where = f"diskless B={brokers}, {interval_ms} ms" if diskless else f"PG engine B={brokers}" if brokers else "embedded"
    label = where + f", {client}" + (
        f" ({which})" if which != "default" else "") + "".join(f" {k}={v}" for k, v in (extra or {}).items()) + (
        " [baseline]" if baseline else "")
    db = f"lat_{brokers}_{time.time_ns()}"
    dsn = pg.create_database(db) if brokers else None
    n = max(brokers, 1)
    metrics = [f"127.0.0.1:{free_port()}" for _ in range(n)]
    env = {"PYTHONPATH": str(baseline / "src")} if baseline else {}
    overrides: dict[str, str] = {}
    if diskless:
        env.update(seaweed.env())
        overrides.update({"diskless.storage.url": f"s3://{seaweed.bucket}/{db}",
                          "diskless.storage.endpoint": endpoint or seaweed.endpoint,
                          "diskless.commit.interval.ms": str(interval_ms)})
    procs = [BrokerProcess(work / f"{db}-b{i}", node_id=i, store=dsn, log_path=work / f"{db}-b{i}.log",
                           env=env or None, overrides={**overrides, "metrics.listen": metrics[i - 1]})
             for i in range(1, n + 1)]
    ctx = mp.get_context("spawn")
    workers: list[Any] = []
    try:
        for b in procs:
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in procs)
        create_topic_admin(bootstrap, TOPIC, PARTITIONS, {"diskless.enable": "true"} if diskless else None)
        wait_leaders(bootstrap, TOPIC, PARTITIONS, timeout=60)
        q = ctx.Queue()
        t_start = time.time() + settle
        conf = settings(client, which, interval_ms, extra)
        for kind, wargs in (("produce", (client, bootstrap, conf, t_start, seconds, rate, size)),
                            ("consume", (bootstrap, t_start, seconds))):
            w = ctx.Process(target=_worker, args=(kind, wargs, q))
            w.start()
            workers.append(w)
        time.sleep(max(0.0, t_start - time.time()))
        d0 = scrape(metrics)
        bp = [psutil.Process(b.pid) for b in procs]
        cpu0 = sum(sum(p.cpu_times()[:2]) for p in bp)
        reports: dict[str, dict] = {}
        for _ in workers:
            kind, out = q.get(timeout=seconds + 240)
            if "error" in out:
                raise RuntimeError(f"{label}: the {kind} client failed: {out['error']}")
            reports[kind] = out
        for w in workers:
            w.join(30)
        cpu1 = sum(sum(p.cpu_times()[:2]) for p in bp)
        time.sleep(1.1)  # a scrape's answer is reused for a second (metrics.MIN_INTERVAL_S)
        d1 = scrape(metrics)
    finally:
        for w in workers:
            if w.is_alive():
                w.kill()
                w.join(10)
        stop_brokers(procs)
        if brokers:
            drop_database(pg, db)
    prod, cons = reports["produce"], reports["consume"]
    if os.environ.get("ONCELOG_BENCH_RAW"):  # the raw times, for a closer look
        Path(os.environ["ONCELOG_BENCH_RAW"]).write_text(json.dumps({"produce": prod, "consume": cons}))
    sent_at, acked, arrived = prod["sent_at"], prod["acked"], cons["arrived"]
    produce = [t - sent_at[seq] for seq, t in acked.items()]
    e2e = [t - sent_at[seq] for seq, t in arrived.items() if seq in sent_at]
    visible = [arrived[seq] - t for seq, t in acked.items() if seq in arrived]
    d = {k: v - d0.get(k, 0.0) for k, v in d1.items()}
    nreq = d.get("produce_count", 0.0)
    timed = d.get("timed_batches", 0.0)
    res = {"config": label, "brokers": brokers, "interval_ms": interval_ms, "client": client, "settings": which,
           "baseline": bool(baseline), "rate": rate, "size": size, "sent": prod["sent"], "acked": len(acked),
           "received": len(arrived), "errors": prod["error_count"], "first_errors": prod["errors"],
           "client_cpu_us_per_record": prod["cpu"] / max(len(acked), 1) * 1e6,
           "rdk_cpu_us_per_record": prod["rdk_cpu"] / max(len(acked), 1) * 1e6,
           "broker_cpu_us_per_record": (cpu1 - cpu0) / max(len(acked), 1) * 1e6,
           "produce_requests": nreq,
           "broker_produce_ms": d.get("produce_seconds", 0.0) / nreq * 1e3 if nreq else float("nan"),
           "objects": d.get("objects", 0.0), "batches": d.get("batches", 0.0)}
    for phase in ("room", "close", "upload", "order", "commit", "complete"):
        res[f"{phase}_ms"] = d[f"phase_{phase}"] / timed * 1e3 if timed and f"phase_{phase}" in d else float("nan")
    for name, xs in (("produce", produce), ("e2e", e2e), ("visible", visible)):
        res[f"{name}_p50_ms"] = _pct(xs, 0.5) * 1e3
        res[f"{name}_p99_ms"] = _pct(xs, 0.99) * 1e3
        res[f"{name}_mean_ms"] = statistics.fmean(xs) * 1e3 if xs else float("nan")
    res["client_wait_ms"] = res["produce_mean_ms"] - res["broker_produce_ms"]
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.diskless_latency", description=__doc__.split("\n\n")[1])
    ap.add_argument("--brokers", type=int, nargs="+", default=[1])
    ap.add_argument("--intervals", type=int, nargs="+", default=[50, 250], metavar="MS")
    ap.add_argument("--clients", nargs="+", default=["confluent"], choices=sorted(RECOMMENDED))
    ap.add_argument("--settings", choices=["default", "recommended"], default="default")
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--size", type=int, default=LATENCY_RECORD)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--embedded", action="store_true", help="also each client against one embedded broker")
    ap.add_argument("--baseline", type=Path, metavar="DIR", help="also the brokers of this source tree, first")
    ap.add_argument("--put-delay-ms", type=int, nargs=2, metavar=("LO", "HI"),
                    help="every PUT delayed by LO..HI ms (uniform) through a fault proxy in front of SeaweedFS: "
                         "an object store slower than loopback")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a producer setting on top of --settings (``{interval}`` is the interval in ms)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    extra = dict(kv.split("=", 1) for kv in args.conf)
    from oncelog.testing.s3_fault_proxy import S3FaultProxy
    from oncelog.testing.seaweedfs import SeaweedServer

    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    seaweed = SeaweedServer(volumes=64).start()
    proxy = None
    endpoint = None
    if args.put_delay_ms:
        proxy = S3FaultProxy(seaweed.s3_port).start()
        proxy.set_fault("delay", delay_s=(args.put_delay_ms[0] / 1000, args.put_delay_ms[1] / 1000), ops=("PUT",))
        endpoint = proxy.endpoint
    rows: list[dict] = []
    try:
        with pg_and_workdir("oncelog-dl-latency-") as (pg, work):
            configs: list[tuple[int, int | None, str]] = []
            for client in args.clients:
                if args.embedded:
                    configs.append((0, None, client))
                configs += [(b, iv, client) for b in args.brokers for iv in args.intervals]
            for b, iv, client in configs:
                for tree in ([args.baseline] if args.baseline and b else []) + [None]:
                    r = measure(pg, seaweed, work, b, iv, client, args.settings, args.rate, args.size, args.seconds,
                                tree, endpoint=endpoint, extra=extra)
                    rows.append(r)
                    print(_line(r), file=sys.stderr, flush=True)
    finally:
        if proxy is not None:
            proxy.close()
        seaweed.close()
    load1 = os.getloadavg()
    line = " ".join(argv if argv is not None else sys.argv[1:])
    print(f"Measured {started}: `python -m bench.diskless_latency {line}`"
          f"; {os.cpu_count()} cores, load average {load0[0]:.1f} before, {load1[0]:.1f} after.\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"started": started, "load": [load0, load1], "rows": rows}, indent=1))
    return 0


def _line(r: dict) -> str:
    return (f"{r['config']}: produce p50/p99 {r['produce_p50_ms']:.0f}/{r['produce_p99_ms']:.0f} ms, e2e "
            f"{r['e2e_p50_ms']:.0f}/{r['e2e_p99_ms']:.0f}, visible after ack {r['visible_p50_ms']:.0f}/"
            f"{r['visible_p99_ms']:.0f}, errors {r['errors']}, close/upload/order/commit/complete "
            f"{r['close_ms']:.0f}/{r['upload_ms']:.0f}/{r['order_ms']:.0f}/{r['commit_ms']:.0f}/{r['complete_ms']:.1f}"
            f" ms, Produce at broker {r['broker_produce_ms']:.0f} ms, client {r['client_wait_ms']:.0f} ms, client CPU "
            f"{r['client_cpu_us_per_record']:.0f} µs/record")


def table(rows: list[dict]) -> str:
    head = ("| config | produce p50 / p99 ms | end-to-end p50 / p99 ms | visible after ack p50 / p99 ms | errors "
            "| in the open object | upload | order | commit | complete | Produce at the broker | in the client "
            "| client CPU µs/record (rdk:broker) |")
    lines = [head, "|---|" + "---:|" * (head.count("|") - 2)]
    for r in rows:
        def f(k: str, fmt: str = "{:.0f}") -> str:
            v = r.get(k, float("nan"))
            return "—" if v != v else fmt.format(v)
        lines.append(
            f"| {r['config']} | {f('produce_p50_ms')} / {f('produce_p99_ms')} | {f('e2e_p50_ms')} / {f('e2e_p99_ms')} "
            f"| {f('visible_p50_ms')} / {f('visible_p99_ms')} | {r['errors']} | {f('close_ms')} | {f('upload_ms')} "
            f"| {f('order_ms')} | {f('commit_ms')} | {f('complete_ms', '{:.1f}')} | {f('broker_produce_ms')} "
            f"| {f('client_wait_ms')} | {f('client_cpu_us_per_record')} ({f('rdk_cpu_us_per_record')}) |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
