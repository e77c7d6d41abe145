"""``python -m bench --cluster-failover [--kills N] [--session-ms MS] [--heartbeat-ms MS] …``
(also ``python -m bench.cluster_failover``)

Failover time of cluster mode (issue 15), measured: PostgreSQL (``oncelog.testing.pgserver``) and
three ``oncelog broker --store …`` processes on loopback, a topic of ``--partitions`` partitions
(two per broker by default), and one confluent-kafka producer (acks=all, idempotent, linger 5 ms,
librdkafka's defaults otherwise) sending one record to every partition every ``--interval-ms``.
Then, ``--kills`` times:

1. the broker to kill is the next of 1, 2, 3; the partitions it leads (Metadata) are the moved ones;
2. SIGKILL (time t0);
3. measured: t0 -> the first acknowledged record *produced after t0* on a moved partition (it
   can only have been written by a new leader); also t0 -> every moved partition has one;
   t0 -> the store shows every moved partition led by another broker (a thread polls
   ``oncelog_partition`` every 20 ms); t0 -> Metadata from the brokers names the new leaders
   (an AdminClient asks every 50 ms); and t0 -> a *new* producer, created as soon as Metadata
   names the new leaders, has one record acknowledged on each moved partition (the server's
   readiness without the long-running client's reconnect and retry backoff);
4. the killed broker is started again (same node id, port, data directory); once Metadata shows
   every partition back at its original leader and an acknowledgement on each after that,
   the next kill follows.

Finally the producer is flushed and every partition read back from the start: each
acknowledged record must be there exactly once (lost and duplicated records are counted and
reported). p50/p99 are over the kills (with 10 kills, p99 is the maximum). Every wait is
bounded; every process started here is stopped here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bench.common import stop_brokers


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[k]


class _Load:
    """The producer thread: one record per partition every ``interval`` seconds."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval: float) -> None:
        from confluent_kafka import Producer

        self.topic, self.partitions, self.interval = topic, partitions, interval
        self.p = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 120_000,
        })
        self.lock = threading.Lock()
        self.acked: list[tuple[int, float, float, int]] = []  # (partition, produced at, acked at, seq)
        self.errors: list[str] = []
        self.seq = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "_Load":
        self.thread.start()
        return self

    def _run(self) -> None:
        nxt = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= nxt:
                for part in range(self.partitions):
                    self._send(part, now)
                nxt += self.interval
            self.p.poll(min(max(nxt - time.monotonic(), 0.0), 0.005))

    def _send(self, part: int, now: float) -> None:
        seq = self.seq
        self.seq += 1

        def cb(err, msg, part=part, now=now, seq=seq):  # type: ignore[no-untyped-def]
            t = time.monotonic()
            with self.lock:
                if err is not None:
                    self.errors.append(f"{t:.3f} p{part}: {err}")
                else:
                    self.acked.append((part, now, t, seq))

        try:
            self.p.produce(self.topic, str(seq).encode(), partition=part, on_delivery=cb)
        except BufferError:
            self.p.poll(0.01)

    def first_ack_after(self, parts: set[int], t0: float) -> dict[int, float]:
        """partition -> acknowledgement time of its first record produced after ``t0``."""
        out: dict[int, float] = {}
        with self.lock:
            for part, produced, acked, _ in self.acked:
                if part in parts and produced >= t0 and (part not in out or acked < out[part]):
                    out[part] = acked
        return out

    def close(self, timeout: float = 60) -> int:
        self.stop.set()
        self.thread.join(10)
        return self.p.flush(timeout)


class _StoreWatch:
    """Polls ``oncelog_partition`` every 20 ms: when did the store move each partition?"""

    def __init__(self, dsn: str, topic: str) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        self.topic = topic
        self.leaders: dict[int, int | None] = {}
        self.changed_at: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            rows = self.conn.execute("SELECT partition, leader_broker FROM oncelog_partition WHERE topic = %s",
                                     (self.topic,)).fetchall()
            t = time.monotonic()
            for part, leader in rows:
                if self.leaders.get(part, -2) != leader:
                    self.leaders[part] = leader
                    self.changed_at[part] = t

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.conn.close()


class _MetadataWatch:
    """Asks the surviving brokers for Metadata every 50 ms (an AdminClient of its own): when did
    the brokers start to *answer* a new leader for each partition?"""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.topic = topic
        self.leaders: dict[int, int] = {}
        self.changed_at: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            try:
                ls = _leaders(self.admin, self.topic)
            except Exception:  # noqa: BLE001 - a broker just died: ask again
                continue
            t = time.monotonic()
            for part, leader in ls.items():
                if self.leaders.get(part, -2) != leader:
                    self.leaders[part] = leader
                    self.changed_at[part] = t

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def _fresh_probe(bootstrap: str, topic: str, parts: set[int], timeout: float = 30) -> float:
    """A new producer (no backoff state, metadata fetched now) sends one record to each of
    ``parts``; returns the monotonic time of the last acknowledgement."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False, "linger.ms": 0,
                  "message.timeout.ms": int(timeout * 1000)})
    done: dict[int, float] = {}
    errors: list[str] = []

    def cb(err, msg):  # type: ignore[no-untyped-def]
        if err is None:
            done[msg.partition()] = time.monotonic()
        else:
            errors.append(str(err))

    for part in parts:
        p.produce(topic, b"probe", partition=part, on_delivery=cb)
    p.flush(timeout)
    if len(done) != len(parts):
        raise RuntimeError(f"probe: {errors[:3]}")
    return max(done.values())


def _leaders(admin, topic: str) -> dict[int, int]:  # type: ignore[no-untyped-def]
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return {p.id: p.leader for p in md.partitions.values()}


def _wait(cond, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout}s")
        time.sleep(0.02)


def _read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 120) -> Counter:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "failover-check", "enable.auto.commit": False,
                  "enable.partition.eof": False})
    seen: Counter = Counter()
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        left = {p: e for p, e in ends.items() if e > 0}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in left])
        deadline = time.monotonic() + timeout
        while left:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read back: partitions {sorted(left)} not read to their end")
            for m in c.consume(num_messages=10_000, timeout=0.5):
                if m.error():
                    raise RuntimeError(str(m.error()))
                if m.value() != b"probe":  # the fresh-producer probes' records
                    seen[int(m.value())] += 1
                if m.partition() in left and m.offset() >= left[m.partition()] - 1:
                    del left[m.partition()]
    finally:
        c.close()
    return seen


def run(kills: int, session_ms: int, heartbeat_ms: int, partitions: int, interval_ms: float,
        work: Path) -> dict:
    from confluent_kafka.admin import AdminClient

    from bench.systems import create_topic_admin, wait_leaders
    from oncelog.process import BrokerProcess
    from oncelog.testing.pgserver import PgServer

    pg = PgServer().start()
    brokers: list[BrokerProcess] = []
    load = watch = mdwatch = None
    out: dict = {"session_ms": session_ms, "heartbeat_ms": heartbeat_ms, "partitions": partitions,
                 "interval_ms": interval_ms, "kills": []}
    try:
        dsn = pg.create_database("failover")
        overrides = {"broker.session.timeout.ms": str(session_ms), "broker.heartbeat.interval.ms": str(heartbeat_ms)}
        brokers = [BrokerProcess(work / f"b{n}", node_id=n, store=dsn, overrides=overrides,
                                 log_path=work / f"b{n}.log") for n in (1, 2, 3)]
        for b in brokers:
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in brokers)
        topic = "failover"
        create_topic_admin(bootstrap, topic, partitions)
        wait_leaders(bootstrap, topic, partitions)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        watch = _StoreWatch(dsn, topic)
        mdwatch = _MetadataWatch(bootstrap, topic)
        # preferred leaders: wait until the deal is the balanced one (every broker leads some)
        home = _wait(lambda: (lambda ls: ls if set(ls.values()) == {1, 2, 3} else None)(_leaders(admin, topic)),
                     30, "every broker leads a partition")
        load = _Load(bootstrap, topic, partitions, interval_ms / 1000).start()
        _wait(lambda: len(load.first_ack_after(set(range(partitions)), time.monotonic() - 1e9)) == partitions,
              30, "first acknowledgements")
        time.sleep(1.0)
        for i in range(kills):
            victim = i % 3 + 1
            moved = {p for p, b in home.items() if b == victim}
            store_before = dict(watch.changed_at)
            probe: dict[str, float] = {}

            def probe_after_move(moved=moved, victim=victim) -> None:  # type: ignore[no-untyped-def]
                try:
                    _wait(lambda: all(mdwatch.leaders.get(p) not in (victim, -1, None) and mdwatch.changed_at.get(p, 0) > t0
                                      for p in moved), 60, "probe")
                    probe["start"] = time.monotonic()
                    probe["acked"] = _fresh_probe(bootstrap, topic, moved)
                except Exception as e:  # noqa: BLE001 - reported as missing
                    print(f"probe failed: {e}", file=sys.stderr)

            prober = threading.Thread(target=probe_after_move, daemon=True)
            t0 = time.monotonic()
            brokers[victim - 1].kill()
            prober.start()
            first = _wait(lambda: (lambda a: a if len(a) == len(moved) else None)(load.first_ack_after(moved, t0)),
                          120, f"kill {i}: every moved partition acknowledged")
            store_moved = _wait(lambda: all(watch.changed_at.get(p, 0) > t0 and watch.leaders.get(p) != victim
                                            for p in moved), 30, f"kill {i}: store moved")
            del store_moved
            _wait(lambda: all(mdwatch.changed_at.get(p, 0) > t0 and mdwatch.leaders.get(p) not in (victim, -1)
                              for p in moved), 30, f"kill {i}: Metadata moved")
            rec = {
                "victim": victim, "moved": sorted(moved),
                "first_ack_s": min(first.values()) - t0,
                "all_moved_acked_s": max(first.values()) - t0,
                "store_moved_s": max(watch.changed_at[p] for p in moved) - t0,
                "store_first_moved_s": min(watch.changed_at[p] for p in moved) - t0,
                "metadata_moved_s": max(mdwatch.changed_at[p] for p in moved) - t0,
            }
            prober.join(60)
            if "acked" in probe:
                rec["fresh_client_ack_s"] = probe["acked"] - t0
            del store_before
            # restart the killed broker; wait for its partitions to come back and be acknowledged there
            t1 = time.monotonic()
            brokers[victim - 1].start(timeout=60)
            _wait(lambda: _leaders(admin, topic) == home, 60, f"kill {i}: leaders back")
            t2 = time.monotonic()
            _wait(lambda: len(load.first_ack_after(moved, t2)) == len(moved), 60, f"kill {i}: acks after return")
            rec["restart_to_leaders_back_s"] = t2 - t1
            out["kills"].append(rec)
            print(f"kill {i}: broker {victim} (partitions {sorted(moved)}): first ack {rec['first_ack_s']:.2f} s, "
                  f"all moved {rec['all_moved_acked_s']:.2f} s, store moved {rec['store_first_moved_s']:.2f}-"
                  f"{rec['store_moved_s']:.2f} s, Metadata moved {rec['metadata_moved_s']:.2f} s, a new client acked {rec.get('fresh_client_ack_s', float('nan')):.2f} s; back {rec['restart_to_leaders_back_s']:.2f} s after restart",
                  file=sys.stderr, flush=True)
            time.sleep(1.0)
        left = load.close()
        load_closed = load
        load = None
        seen = _read_back(bootstrap, topic, partitions)
        acked = {seq for _, _, _, seq in load_closed.acked}
        out["produced"] = load_closed.seq
        out["acked"] = len(acked)
        out["unflushed"] = left
        out["delivery_errors"] = len(load_closed.errors)
        out["delivery_errors_first"] = load_closed.errors[:5]
        out["lost"] = len([s for s in acked if seen[s] == 0])
        out["duplicated"] = sum(1 for s, n in seen.items() if n > 1)
        out["read_not_acked"] = len([s for s in seen if s not in acked])
    finally:
        if load is not None:
            load.close(5)
        if watch is not None:
            watch.close()
        if mdwatch is not None:
            mdwatch.close()
        stop_brokers(brokers)
        pg.close()
    firsts = [k["first_ack_s"] for k in out["kills"]]
    out["summary"] = {
        "kills": len(firsts),
        "first_ack_p50_s": statistics.median(firsts) if firsts else None,
        "first_ack_p99_s": _pct(firsts, 0.99),
        "first_ack_min_s": min(firsts) if firsts else None,
        "all_moved_p50_s": statistics.median(k["all_moved_acked_s"] for k in out["kills"]) if firsts else None,
        "all_moved_p99_s": _pct([k["all_moved_acked_s"] for k in out["kills"]], 0.99),
        "store_moved_p50_s": statistics.median(k["store_moved_s"] for k in out["kills"]) if firsts else None,
        "store_moved_p99_s": _pct([k["store_moved_s"] for k in out["kills"]], 0.99),
        "metadata_moved_p50_s": statistics.median(k["metadata_moved_s"] for k in out["kills"]) if firsts else None,
        "metadata_moved_p99_s": _pct([k["metadata_moved_s"] for k in out["kills"]], 0.99),
        "fresh_client_p50_s": statistics.median(fr) if (fr := [k["fresh_client_ack_s"] for k in out["kills"]
                                                                 if "fresh_client_ack_s" in k]) else float("nan"),
        "fresh_client_p99_s": _pct(fr, 0.99),
    }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench --cluster-failover", description=__doc__.split("\n\n")[1])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--session-ms", type=int, default=2000, help="broker.session.timeout.ms (oncelog's default 9000)")
    ap.add_argument("--heartbeat-ms", type=int, default=400, help="broker.heartbeat.interval.ms (default 2000)")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--interval-ms", type=float, default=5.0, help="one record per partition this often")
    ap.add_argument("--json", type=Path, help="write every kill's figures here")
    args = ap.parse_args(argv)
    import psutil

    load0 = psutil.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="oncelog-failover-") as d:
        out = run(args.kills, args.session_ms, args.heartbeat_ms, args.partitions, args.interval_ms, Path(d))
    out["loadavg_before"] = load0
    out["loadavg_after"] = psutil.getloadavg()[0]
    s = out["summary"]
    print(f"failover, {s['kills']} SIGKILLs, broker.session.timeout.ms={args.session_ms}, heartbeat "
          f"{args.heartbeat_ms} ms, 3 brokers, {args.partitions} partitions (load average {load0:.1f} before, "
          f"{out['loadavg_after']:.1f} after; 2-core shared machine):")
    print(f"  SIGKILL -> first ack on a moved partition: p50 {s['first_ack_p50_s']:.2f} s, p99 {s['first_ack_p99_s']:.2f} s, "
          f"min {s['first_ack_min_s']:.2f} s")
    print(f"  SIGKILL -> every moved partition acked:    p50 {s['all_moved_p50_s']:.2f} s, p99 {s['all_moved_p99_s']:.2f} s")
    print(f"  SIGKILL -> store moved every partition:    p50 {s['store_moved_p50_s']:.2f} s, p99 {s['store_moved_p99_s']:.2f} s")
    print(f"  SIGKILL -> Metadata answers new leaders:   p50 {s['metadata_moved_p50_s']:.2f} s, p99 {s['metadata_moved_p99_s']:.2f} s")
    print(f"  SIGKILL -> a new producer's records acked:  p50 {s['fresh_client_p50_s']:.2f} s, p99 {s['fresh_client_p99_s']:.2f} s "
          "(created once Metadata shows the new leaders: the server side without the long-running client's backoff)")
    print(f"  records: {out['produced']} produced, {out['acked']} acknowledged, {out['lost']} acknowledged but lost, "
          f"{out['duplicated']} duplicated, {out['delivery_errors']} delivery errors {out['delivery_errors_first']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 1 if out["lost"] or out["duplicated"] else 0


if __name__ == "__main__":
    sys.exit(main())
