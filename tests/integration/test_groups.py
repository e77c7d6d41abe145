"""Consumer groups through real clients (R3): consumers of one group split the partitions, the
others take over from one that leaves or is killed, committed offsets survive kill -9 of the
broker and a new consumer starts from them, and the two delivery semantics that committing
enables — at-most-once (commit, then process) and at-least-once (process, then commit).

Each consumer is a separate process (``WORKER`` below, one per client library), so it can be
killed with SIGKILL like a crashed application. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kafka_clients import CLIENTS, create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration

SESSION_MS = 6_000  # group.min.session.timeout.ms: the fastest failure detection allowed

WORKER = r'''
import faulthandler, json, logging, os, signal, sys, time

client, bootstrap, topic, group, mode, crash_after, out_path, idle_exit = sys.argv[1:9]
# Diagnostics, all into this worker's log (its stderr): the clients' INFO lines with times and
# threads, and every thread's stack on SIGUSR1 (sent by the test when a wait for us times out).
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
faulthandler.register(signal.SIGUSR1, all_threads=True)
crash_after, idle_exit = int(crash_after), float(idle_exit)
SESSION, HEARTBEAT = 6000, 1000
stop = False

def on_term(*_):
    global stop
    stop = True

signal.signal(signal.SIGTERM, on_term)

def emit(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()

def process(batch):
    # "processing" = appending the records to a file, durably
    with open(out_path, "a") as f:
        for p, o, v in batch:
            f.write(f"{p} {o} {v}\n")
        f.flush()
        os.fsync(f.fileno())

def crash():
    emit(event="crash")
    os.kill(os.getpid(), signal.SIGKILL)

batches = 0

def handle(batch, commit):
    """commit() commits the positions after ``batch``; the order of the two steps is the
    delivery semantics."""
    global batches
    batches += 1
    if mode == "at-most-once":
        commit()
        if batches == crash_after:
            crash()
        process(batch)
    elif mode == "at-least-once":
        process(batch)
        if batches == crash_after:
            crash()
        commit()
    else:
        process(batch)
        commit()

async def ahandle(batch, commit):
    """handle() for aiokafka, whose commit is a coroutine."""
    global batches
    batches += 1
    if mode == "at-most-once":
        await commit()
        if batches == crash_after:
            crash()
        process(batch)
    elif mode == "at-least-once":
        process(batch)
        if batches == crash_after:
            crash()
        await commit()
    else:
        process(batch)
        await commit()

def next_positions(batch):
    out = {}
    for p, o, _ in batch:
        out[p] = max(out.get(p, 0), o + 1)
    return out

last_assignment = None
last_data = time.monotonic()

def report(parts):
    global last_assignment, last_data
    parts = sorted(parts)
    if parts != last_assignment:
        last_assignment = parts
        last_data = time.monotonic()  # the idle time counts from the (re)assignment
        emit(event="assignment", partitions=parts)

def idle():
    return idle_exit > 0 and last_assignment and time.monotonic() - last_data > idle_exit

if client == "confluent":
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": SESSION, "heartbeat.interval.ms": HEARTBEAT,
                  "enable.partition.eof": False,
                  "partition.assignment.strategy": os.environ.get("ASSIGNOR", "range,roundrobin")})
    c.subscribe([topic])
    while not stop and not idle():
        msgs = [m for m in c.consume(num_messages=10, timeout=0.2) if not m.error()]
        report(tp.partition for tp in c.assignment())
        if msgs:
            last_data = time.monotonic()
            batch = [(m.partition(), m.offset(), m.value().decode()) for m in msgs]
            handle(batch, lambda: c.commit(offsets=[TopicPartition(topic, p, o) for p, o in next_positions(batch).items()],
                                           asynchronous=False))
    c.close()
elif client == "kafka-python":
    from kafka import KafkaConsumer, TopicPartition, OffsetAndMetadata
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=SESSION, heartbeat_interval_ms=HEARTBEAT)
    def om(o):
        try:
            return OffsetAndMetadata(o, "", -1)
        except TypeError:
            return OffsetAndMetadata(o, "")
    while not stop and not idle():
        polled = c.poll(timeout_ms=200, max_records=10)
        report(tp.partition for tp in c.assignment())
        batch = [(m.partition, m.offset, m.value.decode()) for ms in polled.values() for m in ms]
        if batch:
            last_data = time.monotonic()
            handle(batch, lambda: c.commit({TopicPartition(topic, p): om(o) for p, o in next_positions(batch).items()}))
    c.close()
elif client == "aiokafka":
    import asyncio
    from aiokafka import AIOKafkaConsumer, TopicPartition
    async def main():
        global last_data
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=SESSION, heartbeat_interval_ms=HEARTBEAT)
        await c.start()
        try:
            while not stop and not idle():
                polled = await c.getmany(timeout_ms=200, max_records=10)
                report(tp.partition for tp in c.assignment())
                batch = [(m.partition, m.offset, m.value.decode()) for ms in polled.values() for m in ms]
                if batch:
                    last_data = time.monotonic()
                    await ahandle(batch, lambda: c.commit({TopicPartition(topic, p): o for p, o in next_positions(batch).items()}))
        finally:
            await c.stop()
    asyncio.run(main())
emit(event="closed")
'''


class Worker:
    """One consumer process of a group; its JSON events are collected by a thread."""

    def __init__(self, tmp: Path, client: str, bootstrap: str, topic: str, group: str, *, mode: str = "observe",
                 crash_after: int = 0, idle_exit: float = 0.0, out: Path | None = None, assignor: str | None = None) -> None:
        script = tmp / "group_worker.py"
        if not script.exists():
            script.write_text(WORKER)
        self.out = out or tmp / f"out-{id(self)}.txt"
        self.client = client
        self.log = tmp / f"worker-{id(self)}.log"
        self.started = time.monotonic()
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(script), client, bootstrap, topic, group, mode, str(crash_after), str(self.out),
             str(idle_exit)],
            stdout=subprocess.PIPE, stderr=open(self.log, "wb"), start_new_session=True,
            env={**os.environ, **({"ASSIGNOR": assignor} if assignor else {})},
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    @property
    def assignment(self) -> list[int]:
        for e in reversed(list(self.events)):
            if e["event"] == "assignment":
                return e["partitions"]
        return []

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM: the worker closes its consumer (LeaveGroup) and exits, in well under a second
        when nothing is wrong. One that has not exited after ``timeout`` has its stacks dumped
        into its log (SIGUSR1) and is killed; the test's output says so."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"{self.client} worker did not exit within {timeout:.0f}s of SIGTERM; killed; stacks in {self.log}",
                  flush=True)
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            self.kill()

    def wait(self, timeout: float) -> int:
        """The exit status; a worker still running after ``timeout`` fails the test with what it
        printed and its log, including every thread's stack (SIGUSR1), and is killed."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.client} worker still running after {timeout:.0f}s\n{self.describe()}") from None

    def describe(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            self.kill()
        log = self.log.read_text(errors="replace")
        return (f"started {time.monotonic() - self.started:.1f}s ago; events: {self.events[-10:]}\n"
                f"--- worker log ({self.log}, last 6000 chars) ---\n{log[-6000:]}")


def _wait_for(cond, timeout: float, what: str) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if cond():
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _split(workers: list[Worker], partitions: int) -> bool:
    """Every live worker owns at least one partition; together exactly all, disjointly."""
    parts = [w.assignment for w in workers]
    flat = [p for ps in parts for p in ps]
    return all(parts) and sorted(flat) == list(range(partitions))


@pytest.mark.parametrize("client", CLIENTS)
def test_consumers_split_partitions_and_take_over_from_a_leaving_and_a_killed_member(module_broker, tmp_path: Path,
                                                                                    client: str) -> None:
    topic, group, partitions = f"split-{client}", f"g-split-{client}", 6
    create_topic("confluent", module_broker.bootstrap, topic, partitions)
    produce("confluent", module_broker.bootstrap, topic, [(i % partitions, None, f"v{i}".encode()) for i in range(300)])
    workers = [Worker(tmp_path, client, module_broker.bootstrap, topic, group) for _ in range(3)]
    try:
        _wait_for(lambda: _split(workers, partitions), 60, "three consumers to split six partitions")
        # a graceful leave (LeaveGroup): the others take over promptly
        leaving = workers.pop(0)
        leaving.stop()
        took = _wait_for(lambda: _split(workers, partitions), 30, "the two others to take over")
        assert took < SESSION_MS / 1000 + 10
        # a crash (SIGKILL: no LeaveGroup): the last one takes over after the session timeout
        killed = workers.pop(0)
        killed.kill()
        took = _wait_for(lambda: _split(workers, partitions), 60, "the survivor to take over")
        assert took < 2 * SESSION_MS / 1000 + 10, f"takeover took {took:.1f}s"
        # every record was consumed by someone (committed as it went, so none is skipped)
        _wait_for(lambda: len(_seen(tmp_path)) == 300, 30, "all 300 records to be consumed")
    finally:
        for w in workers:
            w.stop()


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_client_side_assignors_work_because_the_broker_is_protocol_agnostic(module_broker, tmp_path: Path,
                                                                            assignor: str) -> None:
    """Eager and incremental cooperative rebalancing both run over the classic protocol (R3)."""
    topic, group, partitions = f"assignor-{assignor}", f"g-{assignor}", 6
    create_topic("confluent", module_broker.bootstrap, topic, partitions)
    workers = [Worker(tmp_path, "confluent", module_broker.bootstrap, topic, group, assignor=assignor) for _ in range(2)]
    try:
        _wait_for(lambda: _split(workers, partitions), 60, f"two {assignor} consumers to split the partitions")
        workers.append(Worker(tmp_path, "confluent", module_broker.bootstrap, topic, group, assignor=assignor))
        _wait_for(lambda: _split(workers, partitions), 60, f"three {assignor} consumers to split the partitions")
        workers.pop(0).stop()
        _wait_for(lambda: _split(workers, partitions), 60, f"two {assignor} consumers to take over")
    finally:
        for w in workers:
            w.stop()


def _seen(tmp_path: Path) -> set[tuple[str, str]]:
    out = set()
    for f in tmp_path.glob("out-*.txt"):
        out |= {tuple(line.split()[:2]) for line in f.read_text().splitlines()}  # type: ignore[misc]
    return out


def _fetch_committed(bootstrap: str, group: str, topic: str, partitions: int, timeout: float = 30) -> dict[int, int]:
    """OffsetFetch with a crafted request, retrying while the coordinator loads (R3)."""
    deadline = time.monotonic() + timeout
    while True:
        with ProtocolClient(bootstrap) as c:
            v = 7
            m = c.classes(apis.OFFSET_FETCH, v)
            req = m["OffsetFetchRequest"](
                group_id=group, require_stable=True,
                topics=(m["OffsetFetchRequestTopic"](name=topic, partition_indexes=tuple(range(partitions))),),
            )
            res = c.request(apis.OFFSET_FETCH, req, version=v)
        if res.error_code != ErrorCode.coordinator_load_in_progress or time.monotonic() > deadline:
            assert res.error_code == ErrorCode.none, res
            return {p.partition_index: p.committed_offset for t in res.topics for p in t.partitions}
        time.sleep(0.2)


@pytest.mark.parametrize("client", CLIENTS)
def test_committed_offsets_survive_kill_9_and_a_new_consumer_resumes_from_them(broker, tmp_path: Path,
                                                                               client: str) -> None:
    topic, group = f"resume-{client}", f"g-resume-{client}"
    create_topic("confluent", broker.bootstrap, topic, 2)
    produce("confluent", broker.bootstrap, topic, [(i % 2, None, f"v{i}".encode()) for i in range(200)])
    first = Worker(tmp_path, client, broker.bootstrap, topic, group, mode="at-least-once", crash_after=4)
    assert first.wait(90) == -signal.SIGKILL, "the worker crashes after its 4th batch, before committing it"
    committed = _fetch_committed(broker.bootstrap, group, topic, 2)
    assert max(committed.values()) > 0
    broker.kill()  # kill -9 of the broker
    broker.start()
    assert _fetch_committed(broker.bootstrap, group, topic, 2) == committed, "offsets survive kill -9 (R3)"
    out = tmp_path / "second.txt"
    second = Worker(tmp_path, client, broker.bootstrap, topic, group, idle_exit=4, out=out)
    assert second.wait(120) == 0
    rows = [line.split() for line in out.read_text().splitlines()]
    first_offsets: dict[int, int] = {}
    for p, o, _ in rows:
        first_offsets.setdefault(int(p), int(o))
    start = {p: max(o, 0) for p, o in committed.items()}  # -1: nothing committed, auto.offset.reset=earliest
    assert first_offsets == {p: o for p, o in start.items() if o < 100}, "the new consumer starts at the committed position"
    assert len(rows) == 200 - sum(start.values())


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("semantics", ["at-most-once", "at-least-once"])
def test_delivery_semantics_commit_then_process_or_process_then_commit(module_broker, tmp_path: Path, client: str,
                                                                       semantics: str) -> None:
    """R3: at-most-once loses the batch in flight at the crash and never duplicates; at-least-once
    duplicates it and never loses anything."""
    topic, group = f"sem-{semantics}-{client}", f"g-sem-{semantics}-{client}"
    create_topic("confluent", module_broker.bootstrap, topic, 1)
    values = [f"v{i}" for i in range(120)]
    produce("confluent", module_broker.bootstrap, topic, [(0, None, v.encode()) for v in values])
    out = tmp_path / "processed.txt"
    crashing = Worker(tmp_path, client, module_broker.bootstrap, topic, group, mode=semantics, crash_after=3, out=out)
    assert crashing.wait(90) == -signal.SIGKILL
    assert any(e["event"] == "crash" for e in crashing.events)
    after_crash = Worker(tmp_path, client, module_broker.bootstrap, topic, group, idle_exit=4, out=out)
    assert after_crash.wait(120) == 0
    processed = [line.split()[2] for line in out.read_text().splitlines()]
    distinct = set(processed)
    if semantics == "at-most-once":
        assert len(processed) == len(distinct), "at-most-once never duplicates"
        lost = set(values) - distinct
        assert lost, "the batch committed but not processed is lost"
        assert len(lost) <= 10, "only the batch in flight at the crash"
    else:
        assert distinct == set(values), "at-least-once never loses a record"
        duplicates = len(processed) - len(distinct)
        assert 0 < duplicates <= 10, "the batch processed but not committed is processed again"
