"""Scenario 2 of ``oncelog verify``: a Jepsen-style queue workload under faults.

Several client processes (confluent-kafka; ``python -m oncelog_tools.verify.queue SLOT …``) each loop
over random operations on one topic:

* a transaction (transactional producer, ``transactional.id`` fixed per slot so that a
  restarted client fences its predecessor): optionally one poll of a read_committed consumer in
  a group, 0..4 sends of unique values to random partitions, the consumed offsets committed in
  the transaction (send_offsets_to_transaction), then commit — or abort, a quarter of the time
  (after an abort the consumer rewinds to the first record it polled in the transaction);
* a plain poll with a synchronous offset commit (no transaction).

Every operation is written to the client's history file as JSON lines (history.Op): once when
invoked, with outcome ``unknown`` and the values it will send, and once when complete with its
outcome, the offsets of its sends and the records polled. A client killed mid-operation leaves
the ``unknown`` line; a client error (timeout, lost connection, fatal producer state) records
``unknown`` and ends the process with status 3, like a crash — the supervisor starts a new
incarnation (a new client name, so per-client monotonicity checks start afresh). Consumer
repositionings (assignment after a rebalance or a start, rewind after an abort) are recorded as
seeks. Times are CLOCK_MONOTONIC, comparable across processes on one machine.

The supervisor (``run``) starts the broker (data dir on a size-limited tmpfs when it can mount
one), a TCP proxy (proxy.py) that the broker advertises, and the clients, then injects faults
chosen at random from the seed: broker SIGKILL (restart), broker SIGSTOP/SIGCONT, client
SIGKILL, client SIGSTOP/SIGCONT, connections cut, connections delayed, disk full (a ballast file
fills the tmpfs for a few seconds, then is deleted). At the end it heals everything, stops the
clients, restarts the broker once cleanly (its log must open), reads every partition to its end
with read_committed (the ``final_read`` op), and runs checker.check over the merged history. An
unexpected broker exit (other than our SIGKILLs) is an anomaly too (``broker-exit``): on a full
disk the broker must answer with errors, not die.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.process import BrokerProcess, free_port
from oncelog_tools.verify.checker import Anomaly, check
from oncelog_tools.verify.history import Op

TOPIC = "queue"
GROUP = "verify-queue"
ABORT_FRACTION = 0.25
#: a client that completes no operation for this long is hung (librdkafka #5456) and is killed
WATCHDOG_S = 45.0
FAULTS = ("broker-kill", "broker-pause", "client-kill", "client-pause", "net-cut", "net-delay", "disk-full")


# --------------------------------------------------------------------------------------------
# the client process


def client_main(slot: int, incarnation: int, bootstrap: str, seed: int, history_path: str) -> int:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    rng = random.Random(seed)
    name = f"c{slot}.{incarnation}"
    out = open(history_path, "a", buffering=1)
    stop = False

    def on_term(_sig, _frame):  # type: ignore[no-untyped-def]
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)

    def write(op: Op) -> None:
        out.write(op.to_json() + "\n")

    pending_seeks: list[tuple[str, int, int]] = []

    def on_assign(_c, parts):  # type: ignore[no-untyped-def]
        pending_seeks.extend((tp.topic, tp.partition, -1) for tp in parts)

    common = {"bootstrap.servers": bootstrap, "reconnect.backoff.max.ms": 500, "socket.timeout.ms": 10_000}
    consumer = Consumer({**common, "group.id": GROUP, "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    consumer.subscribe([TOPIC], on_assign=on_assign)
    producer = Producer({**common, "transactional.id": f"verify-queue-{slot}", "linger.ms": 2,
                         "transaction.timeout.ms": 10_000, "message.timeout.ms": 10_000})
    producer.init_transactions(30)
    nparts = len(consumer.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions)
    seq = 0
    while not stop:
        transactional = rng.random() < 0.8
        sends = []
        if transactional:
            for _ in range(rng.randrange(0, 5)):
                sends.append((TOPIC, rng.randrange(nparts), f"{name}-{seq}", None))
                seq += 1
        do_poll = not transactional or not sends or rng.random() < 0.6
        op = Op(name, time.monotonic(), 0.0, "unknown", list(sends))
        write(op)
        offsets: dict[str, int] = {}
        failed: Exception | None = None
        try:
            if do_poll:
                msgs = consumer.consume(rng.randrange(1, 20), rng.uniform(0.05, 0.5))
                op.seeks = list(pending_seeks)
                pending_seeks.clear()
                for m in msgs:
                    if m.error() is None:
                        op.polls.append((m.topic(), m.partition(), m.offset(), m.value().decode()))
            if not transactional:
                if op.polls:
                    consumer.commit(asynchronous=False)
                op.outcome = "committed"
            else:
                producer.begin_transaction()

                def delivered(err, msg):  # type: ignore[no-untyped-def]
                    if err is None:
                        offsets[msg.value().decode()] = msg.offset()

                for t, p, v, _o in sends:
                    producer.produce(t, value=v.encode(), partition=p, on_delivery=delivered)
                if op.polls:
                    nxt: dict[tuple[str, int], int] = {}
                    for t, p, o, _v in op.polls:
                        nxt[(t, p)] = max(nxt.get((t, p), 0), o + 1)
                    producer.send_offsets_to_transaction([TopicPartition(t, p, o) for (t, p), o in nxt.items()],
                                                         consumer.consumer_group_metadata(), 15)
                if rng.random() < ABORT_FRACTION:
                    producer.abort_transaction(15)
                    op.outcome = "aborted"
                else:
                    if producer.flush(15) != 0:
                        raise TimeoutError("sends not delivered in 15 s")
                    producer.commit_transaction(15)
                    op.outcome = "committed"
        except Exception as exc:  # noqa: BLE001 - the outcome becomes aborted or unknown
            failed = exc
            err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
            if transactional and err is not None and err.txn_requires_abort():
                try:
                    producer.abort_transaction(15)
                    op.outcome = "aborted"
                    failed = None
                except Exception as exc2:  # noqa: BLE001
                    failed = exc2
        if transactional and op.outcome == "aborted" and op.polls:
            first: dict[tuple[str, int], int] = {}
            for t, p, o, _v in op.polls:
                first.setdefault((t, p), o)
            for (t, p), o in first.items():
                try:
                    consumer.seek(TopicPartition(t, p, o))
                except Exception:  # noqa: BLE001 - not assigned any more: nothing to rewind
                    pass
                pending_seeks.append((t, p, o))
        op.sends = [(t, p, v, offsets.get(v)) for t, p, v, _o in sends]
        op.complete = time.monotonic()
        write(op)
        if failed is not None:
            print(f"{name}: {type(failed).__name__}: {failed}", file=sys.stderr, flush=True)
            os._exit(3)
    out.close()
    os._exit(0)


def load_histories(work: Path) -> list[Op]:
    """Merge the clients' history files: the last line written for an op (client, invoke) wins."""
    ops: dict[tuple[str, float], Op] = {}
    for path in sorted(work.glob("history-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                op = Op.from_json(line)
            except (ValueError, KeyError):
                continue  # a line torn by a SIGKILL
            ops[(op.client, op.invoke)] = op
    return sorted(ops.values(), key=lambda op: op.invoke)


# --------------------------------------------------------------------------------------------
# the supervisor


@dataclass
class QueueResult:
    ops: int = 0
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    sends: int = 0
    polled: int = 0
    final_records: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    client_restarts: int = 0
    watchdog_kills: int = 0
    disk: str = "not limited"
    anomalies: list[Anomaly] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _mount_tmpfs(path: Path, size_mb: int) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], capture_output=True)
    return r.returncode == 0


def _fill(path: Path) -> int:
    """Write a ballast file until the filesystem is full; returns the bytes written."""
    chunk = b"\0" * (1 << 20)
    n = 0
    with open(path, "wb", buffering=0) as f:
        while n < 8 << 30:
            try:
                n += f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                # fill the last partial megabyte too
                for small in (65536, 4096, 512):
                    while True:
                        try:
                            n += f.write(b"\0" * small)
                        except OSError:
                            break
                break
    return n


def _final_read(bootstrap: str, deadline_s: float = 90.0) -> Op:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-queue-final", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "log.connection.close": False})
    op = Op("final", time.monotonic(), 0.0, "committed", final_read=True)
    parts = sorted(c.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions)
    c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in parts])
    deadline = time.monotonic() + deadline_s
    high = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in parts}
    next_off = {p: 0 for p in parts}
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        msgs = [m for m in c.consume(10_000, 0.3) if m.error() is None]
        for m in msgs:
            op.polls.append((m.topic(), m.partition(), m.offset(), m.value().decode()))
            next_off[m.partition()] = m.offset() + 1
        if msgs:
            idle_since = time.monotonic()
            continue
        pos = {tp.partition: tp.offset for tp in c.position([TopicPartition(TOPIC, p) for p in parts])}
        # read_committed: the position passes control records and aborted data up to the LSO
        if all(max(pos.get(p, -1), next_off[p]) >= high[p] for p in parts) and time.monotonic() - idle_since > 1:
            break
    else:
        op.outcome = "unknown"
    c.close()
    op.complete = time.monotonic()
    return op


def run(work: Path, *, duration: float, clients: int = 4, partitions: int = 4, seed: int,
        fault_interval: tuple[float, float] = (1.0, 4.0), max_faults: int = 10_000, disk_mb: int = 256,
        faults: tuple[str, ...] = FAULTS, progress=None) -> QueueResult:  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient, NewTopic

    from oncelog_tools.verify.proxy import Proxy

    rng = random.Random(seed)
    result = QueueResult(faults={f: 0 for f in faults})
    start = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    mounted = "disk-full" in faults and _mount_tmpfs(data, disk_mb)
    result.disk = f"tmpfs {disk_mb} MB" if mounted else "not limited (no tmpfs mount: disk-full skipped)"
    if not mounted:
        faults = tuple(f for f in faults if f != "disk-full")
        result.faults.pop("disk-full", None)
    proxy_port = free_port()
    broker = BrokerProcess(data / "broker", log_path=work / "broker.log", overrides={
        "advertised.host": "127.0.0.1", "advertised.port": str(proxy_port),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "4",
        "transaction.state.log.num.partitions": "4",
    })
    broker.start()
    proxy = Proxy(proxy_port, broker.port).start()
    bootstrap = f"127.0.0.1:{proxy_port}"
    procs: dict[int, subprocess.Popen[bytes]] = {}
    incarnation = {s: 0 for s in range(clients)}
    paused: list[tuple[float, str, int]] = []  # (resume at, "broker"|"client", slot)
    ballast = data / "ballast"
    ballast_until = 0.0
    delay_until = 0.0
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log.connection.close": False})
        for f in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
            f.result(30)

        def launch(s: int) -> None:
            incarnation[s] += 1
            procs[s] = subprocess.Popen(
                [sys.executable, "-m", "oncelog_tools.verify.queue", str(s), str(incarnation[s]), bootstrap,
                 str(rng.randrange(1 << 30)), str(work / f"history-{s}.{incarnation[s]}.jsonl")],
                stdout=subprocess.DEVNULL, stderr=open(work / f"client-{s}.log", "ab"), start_new_session=True)

        def heartbeat_age(s: int) -> float:
            try:
                return time.time() - (work / f"history-{s}.{incarnation[s]}.jsonl").stat().st_mtime
            except OSError:
                return 0.0

        def restart_broker() -> None:
            """Start the broker again; a full disk ends first (a broker cannot start without space)."""
            nonlocal ballast_until
            ballast.unlink(missing_ok=True)
            ballast_until = 0.0
            try:
                broker.start(timeout=60)
            except (RuntimeError, TimeoutError) as e:
                result.anomalies.append(Anomaly("broker-exit", f"the broker did not restart: {e}"))
                broker.kill()
                time.sleep(1.0)
                broker.start(timeout=60)

        for s in range(clients):
            launch(s)
        launched_at = {s: time.monotonic() for s in range(clients)}
        deadline = start + duration
        next_fault = time.monotonic() + rng.uniform(*fault_interval)
        n_faults = 0
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = time.monotonic()
            for until, kind, s in list(paused):
                if now >= until:
                    paused.remove((until, kind, s))
                    target = broker.proc if kind == "broker" else procs.get(s)
                    if target is not None and target.poll() is None:
                        target.send_signal(signal.SIGCONT)
            if ballast_until and now >= ballast_until:
                ballast.unlink(missing_ok=True)
                ballast_until = 0.0
            if delay_until and now >= delay_until:
                proxy.set_delay(0.0)
                delay_until = 0.0
            if broker.proc is not None and broker.proc.poll() is not None:
                result.anomalies.append(Anomaly("broker-exit", f"broker exited with {broker.proc.returncode} "
                                                               f"at {now - start:.1f}s; log: {broker.log_tail(600)!r}"))
                broker.kill()
                restart_broker()
            for s, proc in list(procs.items()):
                if proc.poll() is not None:
                    result.client_restarts += 1
                    launch(s)
                    launched_at[s] = now
                elif not any(k == "client" and q == s for _u, k, q in paused) and now - launched_at[s] > WATCHDOG_S \
                        and heartbeat_age(s) > WATCHDOG_S:
                    proc.kill()
                    proc.wait(10)
                    result.watchdog_kills += 1
                    launch(s)
                    launched_at[s] = now
            if now >= next_fault and n_faults < max_faults and faults:
                fault = rng.choice(faults)
                n_faults += 1
                result.faults[fault] += 1
                if fault == "broker-kill":
                    for item in [x for x in paused if x[1] == "broker"]:
                        paused.remove(item)
                    broker.kill()
                    time.sleep(rng.uniform(0.0, 1.5))
                    restart_broker()
                elif fault == "broker-pause" and broker.proc is not None:
                    broker.proc.send_signal(signal.SIGSTOP)
                    paused.append((now + rng.uniform(0.5, 4.0), "broker", -1))
                elif fault == "client-kill":
                    s = rng.randrange(clients)
                    procs[s].kill()
                    procs[s].wait(10)
                    result.client_restarts -= 1  # relaunched by the loop above, not a client error
                elif fault == "client-pause":
                    s = rng.randrange(clients)
                    procs[s].send_signal(signal.SIGSTOP)
                    paused.append((now + rng.uniform(0.5, 12.0), "client", s))
                elif fault == "net-cut":
                    proxy.cut()
                elif fault == "net-delay":
                    proxy.set_delay(rng.uniform(0.05, 0.5))
                    delay_until = now + rng.uniform(1.0, 6.0)
                elif fault == "disk-full":
                    _fill(ballast)
                    ballast_until = now + rng.uniform(1.0, 5.0)
                next_fault = time.monotonic() + rng.uniform(*fault_interval)
            if progress is not None:
                progress(time.monotonic() - start, duration, result)
        # heal, stop the clients, restart the broker cleanly, read everything
        t_end = time.monotonic()
        for _u, kind, s in paused:
            target = broker.proc if kind == "broker" else procs.get(s)
            if target is not None and target.poll() is None:
                target.send_signal(signal.SIGCONT)
        ballast.unlink(missing_ok=True)
        proxy.set_delay(0.0)
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        # each client call is bounded at 15 s, except librdkafka's send_offsets_to_transaction, which
        # can hang past its timeout after a broker restart (librdkafka #5456): such a client is
        # killed, and its open transaction is aborted by the broker's transaction timeout (10 s)
        end = time.monotonic() + 16
        for proc in procs.values():
            try:
                proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        t_clients = time.monotonic()
        if broker.proc is not None and broker.proc.poll() is not None:
            result.anomalies.append(Anomaly("broker-exit", f"broker exited with {broker.proc.returncode} at the end"))
        code = broker.stop()
        if code != 0:
            result.anomalies.append(Anomaly("broker-exit", f"clean shutdown exited with {code}"))
        try:
            broker.start(timeout=60)
        except (RuntimeError, TimeoutError) as e:
            result.anomalies.append(Anomaly("broker-exit", f"the broker does not start after the run: {e}"))
            raise
        proxy.upstream_port = broker.port
        t_broker = time.monotonic()
        final = _final_read(bootstrap)
        result.notes.append(f"end: clients stopped in {t_clients - t_end:.1f} s, broker restarted in "
                            f"{t_broker - t_clients:.1f} s, final read in {time.monotonic() - t_broker:.1f} s")
        if final.outcome != "committed":
            result.anomalies.append(Anomaly("lost", "the final read did not reach the end of every partition"))
        history = load_histories(work) + [final]
        (work / "history.jsonl").write_text("".join(op.to_json() + "\n" for op in history))
        report = check(history)
        result.anomalies += report.anomalies
        result.notes += report.notes
        result.ops = len(history) - 1
        result.committed = report.counts["committed"]
        result.aborted = report.counts["aborted"]
        result.unknown = report.counts["unknown"]
        result.sends = report.counts["sends"]
        result.polled = report.counts["polled"]
        result.final_records = len(final.polls)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        if broker.proc is not None and broker.proc.poll() is None:
            broker.proc.send_signal(signal.SIGCONT)
        broker.kill()
        proxy.close()
        if mounted:
            ballast.unlink(missing_ok=True)
            subprocess.run(["umount", "-l", str(data)], capture_output=True)
    result.seconds = time.monotonic() - start
    return result


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(client_main(int(a[0]), int(a[1]), a[2], int(a[3]), a[4]))
