"""``python -m bench.txn_failover [--rounds N] [--session-ms MS]``

Failover of a transaction coordinator in cluster mode (issue 15), measured: three brokers on a
PostgreSQL started here (oncelog.testing.pgserver, loopback), one confluent-kafka transactional
producer committing one-record transactions back to back. Each round SIGKILLs the broker that
coordinates the producer's transactional id and measures the time from the kill to the first
transaction committed after it (its coordinator partition has moved: the new leader loaded
``__transaction_state``, finished the transaction the dead one left, R19, and answered). The
producer is replaced when librdkafka reports a fatal error (it then re-inits the same id, which
fences the old producer). Then the killed broker is started again and its partitions move
back, and the next round begins. Prints p50 / p99 / max over the rounds and each value.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def _coordinator(bootstrap: str, tid: str) -> int:
    from oncelog.client import ProtocolClient
    from oncelog.protocol import apis

    for _ in range(100):
        for boot in bootstrap.split(","):
            try:
                c = ProtocolClient(boot, timeout=2)
            except OSError:
                continue
            try:
                m = apis.message_class(apis.FIND_COORDINATOR, 4, False)
                r = c.request(apis.FIND_COORDINATOR, m(key_type=1, coordinator_keys=(tid,)), version=4)
                if r.coordinators[0].error_code == 0:
                    return r.coordinators[0].node_id
            finally:
                c.sock.close()
        time.sleep(0.1)
    raise RuntimeError(f"no coordinator for {tid!r}")


class _Committer:
    """Commits one-record transactions in a loop; ``commits`` holds each commit's monotonic end."""

    def __init__(self, bootstrap: str, tid: str, topic: str) -> None:
        self.bootstrap, self.tid, self.topic = bootstrap, tid, topic
        self.commits: list[float] = []
        self.p = None

    def _new(self) -> None:
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.tid, "linger.ms": 0,
                           "transaction.timeout.ms": 20_000, "topic.metadata.refresh.interval.ms": 1000,
                           "reconnect.backoff.max.ms": 200, "log_level": 0})
        self.p.init_transactions(30)

    def once(self) -> None:
        from confluent_kafka import KafkaException

        try:
            if self.p is None:
                self._new()
            self.p.begin_transaction()
            self.p.produce(self.topic, b"x", partition=0)
            self.p.commit_transaction(30)
            self.commits.append(time.monotonic())
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                try:
                    self.p.abort_transaction(30)
                except KafkaException:
                    self.p = None
            elif not err.retriable():
                self.p = None  # fatal (fenced, or the client gave up): a new producer re-inits the id


def run(rounds: int, session_ms: int) -> dict:
    from oncelog.process import BrokerProcess
    from oncelog.testing.pgserver import PgServer

    base = Path(tempfile.mkdtemp(prefix="oncelog-bench-txn-failover-"))
    pg = PgServer().start()
    dsn = pg.create_database("oncelog")
    overrides = {"broker.session.timeout.ms": str(session_ms), "broker.heartbeat.interval.ms": str(max(100, session_ms // 5)),
                 "offsets.topic.num.partitions": "6", "transaction.state.log.num.partitions": "6"}
    brokers = {n: BrokerProcess(base / f"b{n}", node_id=n, store=dsn, overrides=overrides) for n in (1, 2, 3)}
    times: list[float] = []
    try:
        for b in brokers.values():
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("failover", 3, 1)]).values():
            f.result(30)
        c = _Committer(bootstrap, "bench-failover", "failover")
        for _ in range(20):  # warm up
            c.once()
        for r in range(rounds):
            node = _coordinator(bootstrap, c.tid)
            for _ in range(5):
                c.once()
            brokers[node].kill()
            killed = time.monotonic()
            before = len(c.commits)
            deadline = killed + session_ms / 1000 + 60
            while len(c.commits) == before and time.monotonic() < deadline:
                c.once()
            if len(c.commits) == before:
                raise RuntimeError(f"round {r}: no commit within {deadline - killed:.0f} s of the kill")
            times.append(c.commits[before] - killed)
            for attempt in range(20):  # the old session must expire before the node id is free again
                try:
                    brokers[node].start(timeout=60)
                    break
                except RuntimeError:
                    time.sleep(session_ms / 2000)
            for _ in range(30):  # let the partitions move back and the client follow
                c.once()
    finally:
        for b in brokers.values():
            try:
                b.stop(timeout=30)
            except Exception:  # noqa: BLE001
                b.kill()
        pg.close()
    ordered = sorted(times)
    return {
        "rounds": rounds, "session_ms": session_ms, "seconds": [round(t, 3) for t in times],
        "p50_s": round(statistics.median(ordered), 3),
        "p99_s": round(ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))], 3),
        "max_s": round(ordered[-1], 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.txn_failover", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--session-ms", type=int, default=2000, help="broker.session.timeout.ms (Kafka's default: 9000)")
    args = ap.parse_args(argv)
    print(json.dumps(run(args.rounds, args.session_ms), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
