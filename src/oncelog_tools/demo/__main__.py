"""``make demo``: the seed's orders + inventory example, end to end, exactly once, under faults
(R16, R17, R24, R25).

1. An embedded broker (``oncelog broker``, a child process) with topics ``orders``,
   ``inventory``, ``shipments``, ``rejects``.
2. A generator: a confluent-kafka transactional producer writing each order and its inventory
   reservation in ONE transaction across ``orders`` and ``inventory`` (several orders per
   transaction); every ``ABORT_EVERY``-th transaction is aborted on purpose, and some
   reservations do not cover their order.
3. The Spark Structured Streaming job ``oncelog_tools.demo.pipeline`` (a child process, local mode):
   the ``oncelog`` source reads both topics read_committed; a stream-stream join validates and
   enriches every order with its reservation into ``shipments`` or ``rejects`` through the
   exactly-once sink.
4. Faults, while the generator runs: SIGKILL of the whole Spark application (driver, JVM,
   Python workers) in the middle of a micro-batch, then a restart from its checkpoint; SIGKILL of
   the broker and a restart; SIGKILL of one of Spark's Python workers (the task is retried).
5. A checker reads every topic with read_committed and compares it with what the generator
   committed: expected vs found, missing, duplicates, unexpected, per topic. Exit status 1 on any
   difference.

Everything is bounded in time; all traffic is on 127.0.0.1. Files are kept in ``.demo/``
(broker data and log, Spark logs, checkpoint).
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import time
from pathlib import Path

from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from oncelog.process import BrokerProcess
from oncelog_tools.demo.parts import (
    FAULTS, DEMO_LIMIT_S, DRAIN_LIMIT_S, GENERATOR_START_LIMIT_S, ORDERS, ORDERS_PER_S, ORDERS_PER_TXN, PARTITIONS,
    TOPICS, Generator, OutputWatcher, SparkJob, check, client_log, console,
)


# -- the run ----------------------------------------------------------------------------------


def main() -> int:
    from confluent_kafka.admin import AdminClient, NewTopic

    from oncelog_tools.spark.procs import kill_tree

    work = Path(".demo").resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    handler = logging.FileHandler(work / "clients.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    client_log.addHandler(handler)
    client_log.propagate = False
    t0 = time.monotonic()
    events: list[str] = []

    def event(text: str) -> None:
        events.append(f"[dim]{time.monotonic() - t0:6.1f}s[/dim]  {text}")

    broker = BrokerProcess(work / "broker-data", log_path=work / "broker.log")
    broker.start()
    event(f"broker ready on {broker.bootstrap} (pid {broker.pid})")
    job = SparkJob(broker.bootstrap, work)
    watcher = OutputWatcher(broker.bootstrap)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": client_log})
        for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in TOPICS]).values():
            f.result(timeout=30)
        job.start()
        event("Spark pipeline starting (local mode: 2 threads, 4 attempts per task)")
        gen = Generator(broker.bootstrap)
        gen_thread = threading.Thread(target=gen.run, daemon=True)
        watcher.start()

        progress = Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console)
        bar_orders = progress.add_task("orders committed", total=ORDERS)
        bar_out = progress.add_task("shipments + rejects", total=ORDERS)
        faults = list(FAULTS)
        done_at: float | None = None
        kill_wait_since: float | None = None

        def inject(what: str, waited: float) -> bool:
            """Inject one fault; False to try again later (waits are bounded)."""
            if what == "spark":
                # Once the job has done real work, and preferably inside a micro-batch.
                if job.state != "running" or job.rows == 0:
                    return False
                batch = job.batch_in_flight()
                if batch is None and waited < 15:
                    return False
                pids = job.kill()
                where = f"inside micro-batch {batch} (planned, not committed)" if batch is not None else "between micro-batches"
                event(f"[red]SIGKILL Spark[/red] {where}: driver, JVM and Python workers ({len(pids)} processes)")
                job.start()
                event("Spark restarting from its checkpoint")
            elif what == "broker":
                old = broker.pid
                broker.kill()
                event(f"[red]SIGKILL broker[/red] (pid {old}) with transactions in flight")
                broker.start()
                event(f"broker restarted (pid {broker.pid}); producers and Spark tasks reconnect")
            elif what == "worker":
                workers = job.python_workers() if job.state == "running" else []
                if not workers:
                    if waited < 20:
                        return False
                    event("[yellow]no Spark Python worker to kill; skipped[/yellow]")
                else:
                    kill_tree(workers[-1])
                    event(f"[red]SIGKILL a Spark Python worker[/red] (pid {workers[-1]}): a task running in it fails, Spark retries it")
            return True

        def status() -> Table:
            t = Table.grid(padding=(0, 2))
            last = "none yet" if job.last_batch is None else str(job.last_batch)
            t.add_row("Spark", f"{job.state}; run {job.runs}; last micro-batch {last}")
            t.add_row("broker", f"pid {broker.pid}, {broker.bootstrap}")
            t.add_row("generator", f"{len(gen.committed):,} committed, {len(gen.aborted):,} aborted on purpose"
                      + (f", {gen.retries} retried" if gen.retries else ""))
            return t

        def view() -> Group:
            progress.update(bar_orders, completed=len(gen.committed))
            progress.update(bar_out, completed=sum(watcher.counts.values()))
            return Group(progress, status(), *events[-16:])

        with Live(view(), console=console, refresh_per_second=4, transient=False) as live:
            while True:
                time.sleep(0.25)
                live.update(view())
                now = time.monotonic()
                if not gen_thread.is_alive() and not gen.done and (job.state == "running" or now - t0 > GENERATOR_START_LIMIT_S):
                    gen_thread.start()
                    event(f"generator started: {ORDERS:,} orders, {ORDERS_PER_TXN} per transaction, {ORDERS_PER_S:.0f}/s")
                if gen.error:
                    event(f"[red]generator failed: {gen.error}[/red]")
                    break
                if faults and len(gen.committed) / ORDERS >= faults[0][0]:
                    kill_wait_since = kill_wait_since or now
                    if inject(faults[0][1], now - kill_wait_since):
                        faults.pop(0)
                        kill_wait_since = None
                if not job.restart_if_exited(event):
                    break
                expected_total = len(gen.committed)
                if gen.done and done_at is None:
                    done_at = now
                    event("generator finished; waiting for the pipeline to catch up")
                if gen.done and not gen.error and sum(watcher.counts.values()) >= expected_total:
                    time.sleep(2.0)  # one more trigger interval: a duplicate would show up
                    live.update(view())
                    event("all output visible; stopping the pipeline")
                    break
                if (done_at and now - done_at > DRAIN_LIMIT_S) or now - t0 > DEMO_LIMIT_S:
                    event("[red]time limit reached[/red]; checking what is there")
                    break
            for _, what in faults:
                event(f"[yellow]fault '{what}' was not injected (the run ended first)[/yellow]")
            job.stop()
            live.update(view())
        watcher.stop()
        console.print()

        table, ok, notes = check(broker.bootstrap, gen)
        console.print(table)
        for n in notes:
            console.print(n)
        if gen.error:
            ok = False
        console.print(f"wall time {time.monotonic() - t0:.0f} s; logs in {work}")
        console.print("[bold green]PASS: every record exactly once[/bold green]" if ok else "[bold red]FAIL[/bold red]")
        return 0 if ok else 1
    finally:
        watcher.stop()
        if job.alive:
            job.kill()
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
