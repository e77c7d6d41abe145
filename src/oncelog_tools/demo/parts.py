"""The pieces of ``make demo`` (``__main__``) that ``make demo-cluster`` (``cluster``) runs too:
the orders and their expected join result, the transactional generator, the supervised Spark job,
the live output counter and the read_committed checker. Described in ``__main__``'s docstring."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.table import Table

# At least 120 columns even when the output is piped (make, CI logs), so the verification
# table is never cut short.
console = Console(width=max(120, Console().width))
#: The Kafka clients' own log lines (connection errors while the broker is down, ...) go to
#: .demo/clients.log instead of the terminal, where they would break the live view.
client_log = logging.getLogger("oncelog_tools.demo.clients")

ORDERS = 6000
ORDERS_PER_TXN = 20
ORDERS_PER_S = 120.0
#: Every ABORT_EVERY-th transaction is aborted on purpose (its orders must never be seen).
ABORT_EVERY = 12
#: Every SHORT_EVERY-th order gets a reservation that does not cover it (a reject).
SHORT_EVERY = 17
PARTITIONS = 3
TOPICS = ("orders", "inventory", "shipments", "rejects")
#: Faults, in this order, at these fractions of the orders committed.
FAULTS = ((0.2, "worker"), (0.45, "spark"), (0.7, "broker"))
#: The generator starts when the Spark query runs, or after this long anyway.
GENERATOR_START_LIMIT_S = 120.0
#: Hard limits (seconds): the whole demo, and the wait for the output after the last order.
DEMO_LIMIT_S = 420.0
DRAIN_LIMIT_S = 150.0


def order_of(i: int) -> tuple[dict, dict]:
    """Order ``i`` and its reservation (deterministic)."""
    sku = f"sku-{i % 53:03d}"
    qty = 1 + i % 5
    order = {"order_id": i, "customer": f"c-{i % 211}", "sku": sku, "qty": qty, "unit_price_cents": 199 + (i * 37) % 5000}
    reserved = qty - 1 if i % SHORT_EVERY == 0 else qty
    reservation = {"order_id": i, "sku": sku, "reserved": reserved, "warehouse": f"w-{i % 4}"}
    return order, reservation


def expected_output(order: dict, reservation: dict) -> tuple[str, dict]:
    """What the pipeline must make of an order (the checker's independent statement of it)."""
    if reservation["sku"] == order["sku"] and reservation["reserved"] >= order["qty"]:
        return "shipments", {
            "order_id": order["order_id"], "customer": order["customer"], "sku": order["sku"], "qty": order["qty"],
            "warehouse": reservation["warehouse"], "amount_cents": order["qty"] * order["unit_price_cents"],
            "status": "ready",
        }
    return "rejects", {
        "order_id": order["order_id"], "sku": order["sku"], "qty": order["qty"], "reserved": reservation["reserved"],
        "reason": "insufficient stock",
    }


# -- the generator ----------------------------------------------------------------------------


@dataclass
class Generator:
    """Writes ``orders`` orders (ORDERS), ORDERS_PER_TXN per transaction, paced at ``rate``
    orders/s (ORDERS_PER_S; another thread may change it while it runs); records which orders
    were committed and which were aborted on purpose. Runs in a thread."""

    bootstrap: str
    orders: int = ORDERS
    rate: float = ORDERS_PER_S
    committed: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)
    retries: int = 0
    error: str | None = None
    done: bool = False

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # reported by the demo, which then fails
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.done = True

    def _run(self) -> None:
        from confluent_kafka import KafkaException, Producer

        p = Producer({
            "bootstrap.servers": self.bootstrap, "transactional.id": "demo-order-generator", "linger.ms": 5,
            "transaction.timeout.ms": 60_000, "message.timeout.ms": 60_000, "logger": client_log,
        })
        p.init_transactions(60)
        due = time.monotonic()  # when the next transaction is due; ``rate`` may change meanwhile
        next_id, txn = 0, 0
        while len(self.committed) < self.orders:
            txn += 1
            abort = txn % ABORT_EVERY == 0
            ids = list(range(next_id, next_id + (ORDERS_PER_TXN if abort else min(ORDERS_PER_TXN, self.orders - len(self.committed)))))
            next_id += len(ids)
            for attempt in range(10):
                try:
                    p.begin_transaction()
                    for i in ids:
                        order, reservation = order_of(i)
                        key = str(i).encode()
                        p.produce("orders", json.dumps(order).encode(), key)
                        p.produce("inventory", json.dumps(reservation).encode(), key)
                    if abort:
                        p.flush(60)  # the records reach the log, then the abort marker follows them
                        p.abort_transaction(60)
                        self.aborted += ids
                    else:
                        self._commit(p)
                        self.committed += ids
                    break
                except KafkaException as exc:
                    err = exc.args[0]
                    if not err.txn_requires_abort() or attempt == 9:
                        raise
                    # The transaction cannot complete (e.g. its records timed out while the
                    # broker was down): abort it — none of it becomes visible — and write the
                    # same orders again in a new one.
                    self.retries += 1
                    p.abort_transaction(60)
            # Pace: each committed order moves the next transaction 1 / rate seconds on.
            if not abort:
                due += len(ids) / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def _commit(self, p: Any) -> None:
        from confluent_kafka import KafkaException

        for attempt in range(30):
            try:
                p.commit_transaction(60)
                return
            except KafkaException as exc:
                # A retriable failure (coordinator restarting) leaves the commit to be retried;
                # anything else goes to the caller.
                if not exc.args[0].retriable() or attempt == 29:
                    raise
                self.retries += 1
                time.sleep(0.5)


# -- the Spark job, supervised ----------------------------------------------------------------


class SparkJob:
    """The pipeline as a child process: start, SIGKILL (the whole process tree), restart."""

    def __init__(self, bootstrap: str, work: Path) -> None:
        self.bootstrap = bootstrap
        self.work = work
        self.checkpoint = work / "checkpoint"
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.batches = 0
        self.last_batch: int | None = None
        self.rows = 0
        #: (time.monotonic() when seen, batch id, rows, duration in ms) of every finished micro-batch
        self.history: list[tuple[float, int, int, int]] = []
        self.state = "not started"
        self.failure: str | None = None
        self.failed_restarts = 0

    def start(self) -> None:
        from oncelog_tools.spark.procs import kill_tree  # noqa: F401  (fail early if missing)

        self.runs += 1
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
        log = open(self.work / f"spark-run{self.runs}.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oncelog_tools.demo.pipeline", "--bootstrap", self.bootstrap, "--checkpoint", str(self.checkpoint)],
            stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True,
        )
        log.close()
        self.state = "starting (JVM, SparkSession)" if self.runs == 1 else "restarting from its checkpoint"
        threading.Thread(target=self._follow, args=(self.proc,), daemon=True).start()

    def _follow(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if proc is not self.proc:
                return
            if "started" in msg:
                self.state = "running"
            elif "batch" in msg:
                self.batches += 1
                self.last_batch = msg["batch"]
                self.rows += msg["rows"]
                self.history.append((time.monotonic(), msg["batch"], msg["rows"], msg.get("ms") or 0))
            elif "failed" in msg:
                self.failure = msg["failed"]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    #: restarts after the job exited on its own (not killed by the demo) before a demo gives up
    MAX_FAILED_RESTARTS = 3

    def restart_if_exited(self, event: Callable[[str], None]) -> bool:
        """When the job exited on its own (not killed or stopped by the demo): say so through
        ``event`` and restart it from its checkpoint. False once it has failed more than
        ``MAX_FAILED_RESTARTS`` times (the demo gives up); True otherwise."""
        if self.alive or self.state in ("killed", "stopped"):
            return True
        self.failed_restarts += 1
        why = self.failure or f"exit status {self.proc.returncode if self.proc else '?'}"
        event(f"[yellow]Spark exited ({why[:200]}); restarting from its checkpoint[/yellow]")
        self.failure = None
        if self.failed_restarts > self.MAX_FAILED_RESTARTS:
            return False
        self.start()
        return True

    def batch_in_flight(self) -> int | None:
        """A micro-batch Spark has planned (offsets log) and not finished (commit log)."""
        planned = {int(f.name) for f in (self.checkpoint / "offsets").glob("[0-9]*")}
        done = {int(f.name) for f in (self.checkpoint / "commits").glob("[0-9]*")}
        pending = planned - done
        return max(pending) if pending else None

    def kill(self) -> list[int]:
        from oncelog_tools.spark.procs import kill_tree

        assert self.proc is not None
        pids = kill_tree(self.proc.pid)
        self.proc.wait(timeout=30)
        self.state = "killed"
        return pids

    def python_workers(self) -> list[int]:
        """Forked Python workers of the tasks (children of the ``pyspark.worker`` daemon)."""
        from oncelog_tools.spark.procs import descendants

        if self.proc is None:
            return []
        tree = descendants(self.proc.pid)
        daemons = [p for p in tree if _cmdline(p).endswith(b"pyspark.daemon\0pyspark.worker\0")]
        return [c for d in daemons for c in descendants(d)]

    def stop(self) -> None:
        if not self.alive:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self.state = "stopped"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


# -- live view of the output ------------------------------------------------------------------


class OutputWatcher:
    """Counts the records read_committed consumers can see in ``shipments`` and ``rejects``
    (with duplicates: a duplicate would show as a count above the expected one).
    ``isolation="read_uncommitted"`` counts what the sink has written, its open transactions
    included (``make demo-cluster`` kills Spark while they hold records)."""

    def __init__(self, bootstrap: str, isolation: str = "read_committed") -> None:
        self.bootstrap = bootstrap
        self.isolation = isolation
        self.counts: Counter = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"demo-watch-{self.isolation}",
                      "enable.auto.commit": False, "isolation.level": self.isolation, "fetch.wait.max.ms": 100,
                      "logger": client_log})
        c.assign([TopicPartition(t, p, 0) for t in ("shipments", "rejects") for p in range(PARTITIONS)])
        try:
            while not self._stop.is_set():
                for m in c.consume(5000, timeout=0.3):
                    if m.error() is None:
                        self.counts[m.topic()] += 1
        finally:
            c.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# -- the checker ------------------------------------------------------------------------------


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 120.0) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of ``topic`` visible at ``isolation``, read to the end of every partition."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-check", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": isolation, "logger": client_log})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[tuple[bytes, bytes]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < PARTITIONS:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}: no end after {timeout:.0f}s")
            for m in c.consume(10_000, timeout=0.5):
                if m.error() is None:
                    out.append((m.key(), m.value()))
                    at_end.discard(m.partition())
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
    finally:
        c.close()
    return out


def check(bootstrap: str, gen: Generator) -> tuple[Table, bool, list[str]]:
    """Compare every topic (read_committed) with what the generator committed."""
    committed = sorted(gen.committed)
    expected: dict[str, dict[int, dict]] = {t: {} for t in TOPICS}
    for i in committed:
        order, reservation = order_of(i)
        expected["orders"][i] = order
        expected["inventory"][i] = reservation
        topic, value = expected_output(order, reservation)
        expected[topic][i] = value
    aborted = set(gen.aborted)

    table = Table(title="verification: every topic read with isolation.level=read_committed")
    for col in ("topic", "expected", "found", "missing", "dups", "unexpected", "wrong", "aborted", ""):
        table.add_column(col, justify="right")
    ok = True
    notes = ["dups: records found more than once; unexpected: orders nobody committed; wrong: content differs "
             "from the expected join result; aborted: records of an aborted transaction."]
    for topic in TOPICS:
        found = [(int(k), json.loads(v)) for k, v in read_topic(bootstrap, topic)]
        ids = Counter(i for i, _ in found)
        want = expected[topic]
        missing = sum(1 for i in want if i not in ids)
        dups = sum(n - 1 for n in ids.values() if n > 1)
        unexpected = sum(1 for i in ids if i not in want)
        wrong = sum(1 for i, v in found if i in want and v != want[i])
        aborted_seen = sum(1 for i in ids if i in aborted)
        good = missing == dups == unexpected == wrong == aborted_seen == 0 and len(found) == len(want)
        ok &= good
        mark = "[green]✔[/green]" if good else "[red]✘[/red]"
        table.add_row(topic, f"{len(want):,}", f"{len(found):,}", str(missing), str(dups), str(unexpected), str(wrong),
                      str(aborted_seen), mark)
    raw = Counter(int(k) for k, _ in read_topic(bootstrap, "orders", isolation="read_uncommitted"))
    in_log = sum(1 for i in aborted if i in raw)
    notes.append(
        f"{len(aborted):,} orders were written in {len(aborted) // ORDERS_PER_TXN} aborted transactions: "
        f"{in_log:,} of them are in the log (a read_uncommitted consumer sees them), 0 may be visible above."
    )
    if in_log != len(aborted):
        notes.append("[yellow]some aborted orders are not even in the log (the generator aborted before sending them)[/yellow]")
    return table, ok, notes
