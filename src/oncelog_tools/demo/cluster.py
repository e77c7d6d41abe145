"""``make demo-cluster`` (``python -m oncelog_tools.demo.cluster``): ``make demo``'s pipeline on the
scaled-out form — three brokers on PostgreSQL with diskless topics (issue 29, docs/DISKLESS.md) —
exactly once through a broker SIGKILL, an object-store restart and a Spark kill (R16, R17, R24, R25).

1. PostgreSQL (``oncelog.testing.pgserver``, as an unprivileged user), one SeaweedFS S3 server
   (``oncelog.testing.seaweedfs``) and three ``oncelog broker`` processes on them
   (``oncelog.testing.Cluster``: short broker sessions, six partitions per internal topic),
   every broker given ``diskless.storage.url`` / ``.endpoint`` and the AWS_* credentials; all on
   127.0.0.1.
2. The topics ``orders``, ``inventory`` (input), ``shipments``, ``rejects`` (output) created with
   ``diskless.enable=true``, PARTITIONS partitions each, replication factor 3 (cluster mode's
   replication: the store keeps the data, the partition leader is the one replica that serves);
   their record batches go to SeaweedFS, PostgreSQL keeps their coordinates. The internal topics
   (transactions, offsets) stay on the PostgreSQL engine.
3. ``make demo``'s generator (orders and reservations in one transaction, every ABORT_EVERY-th
   transaction aborted on purpose) and its Spark job (``oncelog_tools.demo.pipeline``: the
   stream-stream join through the exactly-once sink), unchanged (``parts``).
4. Three faults, each fired only when the pipeline is live — the generator has committed the
   fault's fraction of the orders, Spark runs, and the output has grown since the previous fault
   — so each one lands on transactions and micro-batches in flight:
   - ``broker``: SIGKILL of the broker leading the most partitions of the four topics (leaders
     move to the other two after its session expires), then a restart of it;
   - ``object store``: SIGKILL of SeaweedFS, OUTAGE_S seconds without it (uploads and range GETs
     fail and are retried under the call deadline: no produce is acknowledged meanwhile), then a
     restart on the same directory and ports;
   - ``spark``: SIGKILL of the whole Spark application (driver, JVM, Python workers), inside a
     micro-batch when one is in flight, then a restart from its checkpoint.
   Each fault prints when it fired, what the pipeline had done by then, and afterwards what the
   pipeline saw: how long the output stood still, the longest micro-batch after it, the
   generator's retried transactions, the brokers' object-store warnings.
5. ``make demo``'s checker: every topic read with read_committed and compared with what the
   generator committed (expected, found, missing, duplicates, unexpected, wrong, aborted).
   Exit status 0 only on PASS with all three faults fired.

Every wait is bounded; every process started (brokers, PostgreSQL, SeaweedFS, Spark) is stopped
or killed at the end, on failure and on Ctrl-C / SIGTERM too. Files are kept in ``--dir``
(default ``.demo-cluster/``: broker data and logs, SeaweedFS's log, Spark logs, checkpoint).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from oncelog_tools.demo.parts import (
    GENERATOR_START_LIMIT_S, ORDERS, ORDERS_PER_TXN, PARTITIONS, TOPICS, Generator, OutputWatcher, SparkJob, check,
    client_log, console,
)

BROKERS = 3
#: Faults, in this order, at these fractions of the orders committed, each only while the
#: pipeline is live (see ``_run``). Spark's kill comes last: its restart takes the longest.
FAULTS = ((0.15, "broker"), (0.4, "object store"), (0.6, "spark"))
#: The Spark kill waits (at most this long) for the moment the sink has written records of the
#: micro-batch in flight that are not committed yet; then it takes any micro-batch in flight.
SPARK_SHARP_WAIT_S = 60.0
#: While a fault is still to come, the generator slows to a quarter of its rate from this
#: fraction of the orders on, so the last faults land while it writes (Spark's first
#: micro-batch can take half a minute on a loaded machine); the rate comes back after them.
SLOW_FROM = 0.8
#: Seconds SeaweedFS stays down (inside the brokers' 30 s call deadline: the uploads stall and
#: are retried, no produce is answered meanwhile).
OUTAGE_S = 8.0
#: The generator's pace here (``make demo``: 120/s): a diskless produce is answered at its
#: object's commit (every 100 ms here), so a transaction of 20 orders takes a few hundred
#: milliseconds; at 60 orders/s the generator keeps its pace on a loaded 2-core machine and
#: runs long enough (about 100 s) for the three faults to land while it writes.
ORDERS_PER_S = 60.0
DRAIN_LIMIT_S = 240.0
DEMO_LIMIT_S = 900.0
#: Broker properties besides the object store's (docs/COMPATIBILITY-configs.md).
BROKER_PROPS = {"diskless.commit.interval.ms": "100"}
#: A line of a Kafka client's log (librdkafka: connection refused, timed out, ...) in Spark's logs.
CLIENT_ERROR = ("rdkafka", "KafkaError", "KafkaException")


@dataclass
class Fault:
    """One fault, the pipeline's state when it fired, and what the pipeline saw of it."""

    what: str
    detail: str
    fired_at: float
    output_at_fire: int
    committed_at_fire: int
    retries_at_fire: int
    #: sizes of Spark's logs when the fault fired (what the pipeline logged after it is counted)
    spark_logs: dict[Path, int]
    over_at: float = 0.0  # the thing hurt is serving again (broker / SeaweedFS ready, Spark relaunched)
    committed_at_over: int = 0
    output_resumed_at: float | None = None  # the output's first growth after the fault was over
    retried: int = 0  # the generator's transactions aborted and written again because of it


def _spark_logs(work: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in sorted(work.glob("spark-run*.log"))}


def _client_errors(start: dict[Path, int], end: dict[Path, int] | None, work: Path) -> int:
    """Kafka-client error lines Spark logged between two snapshots of its logs (``end`` None: now)."""
    end = end if end is not None else _spark_logs(work)
    n = 0
    for path, stop in end.items():
        try:
            with open(path, "rb") as f:
                f.seek(start.get(path, 0))
                text = f.read(max(0, stop - start.get(path, 0))).decode(errors="replace")
        except OSError:
            continue
        n += sum(1 for line in text.splitlines() if any(w in line for w in CLIENT_ERROR))
    return n


def _leaders(bootstrap: str) -> dict[int, list[str]]:
    """Node id -> the partitions of the demo's topics it leads (Metadata)."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap, "logger": client_log}).list_topics(timeout=15)
    out: dict[int, list[str]] = {}
    for t in TOPICS:
        for p, pm in sorted(md.topics[t].partitions.items()):
            out.setdefault(pm.leader, []).append(f"{t}[{p}]")
    return out


def _create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": client_log})
    topics = [NewTopic(t, PARTITIONS, BROKERS, config={"diskless.enable": "true"}) for t in TOPICS]
    for f in admin.create_topics(topics).values():
        f.result(timeout=60)
    # Each topic's config as the brokers state it (DescribeConfigs), not as asked.
    from confluent_kafka.admin import ConfigResource

    res = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in TOPICS]
    for r, f in admin.describe_configs(res).items():
        value = f.result(timeout=30)["diskless.enable"].value
        if value != "true":
            raise RuntimeError(f"topic {r.name}: diskless.enable={value}, not true")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oncelog_tools.demo.cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("--orders", type=int, default=ORDERS, help=f"orders the generator commits (default {ORDERS})")
    ap.add_argument("--rate", type=float, default=ORDERS_PER_S, help=f"orders per second (default {ORDERS_PER_S:g})")
    ap.add_argument("--dir", type=Path, default=Path(".demo-cluster"), help="where logs and data go (emptied first)")
    ap.add_argument("--outage", type=float, default=OUTAGE_S, help=f"seconds SeaweedFS stays down (default {OUTAGE_S:g})")
    args = ap.parse_args(argv)
    if args.orders < 10 * ORDERS_PER_TXN or args.rate <= 0:
        ap.error(f"--orders must be at least {10 * ORDERS_PER_TXN} and --rate positive")

    # SIGTERM ends the run as Ctrl-C does: through the finally blocks that stop every process.
    def _term(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    work = args.dir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    handler = logging.FileHandler(work / "clients.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    client_log.addHandler(handler)
    client_log.propagate = False
    t0 = time.monotonic()
    events: list[str] = []
    watching = False

    def event(text: str) -> None:
        """A line of the run's log; printed at once until the live view takes over the screen."""
        events.append(f"[dim]{time.monotonic() - t0:6.1f}s[/dim]  {text}")
        if not watching:
            console.print(events[-1])

    from oncelog.testing.cluster import Cluster
    from oncelog.testing.seaweedfs import SeaweedServer

    s3 = SeaweedServer(work / "seaweedfs")
    cluster: Cluster | None = None
    job: SparkJob | None = None
    watcher: OutputWatcher | None = None
    written: OutputWatcher | None = None
    try:
        s3.start()
        event(f"SeaweedFS S3 ready on {s3.endpoint} (pid {s3.proc.pid if s3.proc else '?'}), bucket {s3.bucket}")
        props = {**BROKER_PROPS, "diskless.storage.url": f"s3://{s3.bucket}/demo", "diskless.storage.endpoint": s3.endpoint}
        cluster = Cluster(BROKERS, props, base_dir=work / "cluster", env=s3.env()).start()
        bootstrap = cluster.bootstrap_servers
        event(f"PostgreSQL on 127.0.0.1:{cluster.store.port if cluster.store else '?'}; {BROKERS} brokers: {bootstrap}")
        _create_topics(bootstrap)
        leaders = _leaders(bootstrap)
        event(f"topics {', '.join(TOPICS)}: {PARTITIONS} partitions each, diskless.enable=true, replication factor "
              f"{BROKERS}; leaders: " + "; ".join(f"broker {n}: {len(ps)}" for n, ps in sorted(leaders.items())))
        job = SparkJob(bootstrap, work)
        job.start()
        event("Spark pipeline starting (local mode: 2 threads, 4 attempts per task)")
        gen = Generator(bootstrap, orders=args.orders, rate=args.rate)
        gen_thread = threading.Thread(target=gen.run, daemon=True)
        watcher = OutputWatcher(bootstrap)
        watcher.start()
        written = OutputWatcher(bootstrap, "read_uncommitted")
        written.start()
        watching = True
        faults, unfired = _run(args, work, cluster, s3, job, gen, gen_thread, watcher, written, event, events, t0)
        watcher.stop()
        written.stop()
        console.print()
        all_fired = not unfired and [f.what for f in faults] == [what for _, what in FAULTS]
        table, ok, notes = check(bootstrap, gen)
        console.print(_fault_table(faults, job, work, t0))
        if not all_fired:
            ok = False
            notes.append("[red]not every fault landed while the pipeline ran: FAIL (a slower --rate or more --orders "
                         "gives them room)[/red]")
        console.print(table)
        for n in notes:
            console.print(n)
        if gen.error:
            ok = False
        console.print(f"wall time {time.monotonic() - t0:.0f} s; logs in {work}")
        console.print("[bold green]PASS: every record exactly once[/bold green]" if ok else "[bold red]FAIL[/bold red]")
        return 0 if ok else 1
    finally:
        from rich.text import Text

        (work / "events.log").write_text("".join(Text.from_markup(e).plain + "\n" for e in events))
        for w in (watcher, written):
            if w is not None:
                w.stop()
        if job is not None and job.alive:
            job.kill()
        if cluster is not None:
            cluster.close()
        s3.close()


def _output(watcher: OutputWatcher) -> int:
    return sum(watcher.counts.values())


def _run(args, work, cluster, s3, job, gen, gen_thread, watcher, written, event, events, t0) -> tuple[list[Fault], list[str]]:  # type: ignore[no-untyped-def]
    """The live part: generator, Spark supervision, the faults, the drain. Returns the faults
    injected and those that could not land while the generator ran (a failed run)."""
    progress = Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console)
    bar_orders = progress.add_task("orders committed", total=args.orders)
    bar_out = progress.add_task("shipments + rejects", total=args.orders)
    pending = list(FAULTS)
    done: list[Fault] = []
    unfired: list[str] = []
    done_at: float | None = None
    shown_from = len(events)  # the lines printed before the live view are not repeated in it
    armed: list = [None, 0]  # the micro-batch the Spark kill watches, and what the sink had written then

    def live(now: float) -> bool:
        """The pipeline is live: the generator writes, Spark runs and has written output, and the
        output grew again after the previous fault (so no two faults overlap)."""
        if gen.done or job.state != "running" or job.rows == 0:
            return False
        return not done or (done[-1].output_resumed_at is not None and now - done[-1].output_resumed_at > 2.0)

    def inject(what: str, waited: float) -> Fault | None:
        f = Fault(what, "", time.monotonic(), _output(watcher), len(gen.committed), gen.retries, _spark_logs(work))
        seen = (f"output {f.output_at_fire:,}, orders committed {f.committed_at_fire:,}, "
                f"last finished micro-batch {job.last_batch}")
        if what == "spark":
            # Inside a micro-batch (planned in the offsets log, not in the commit log) whose sink
            # tasks have written records not yet committed: read_uncommitted sees more than when
            # the batch was first seen in flight. A re-execution must neither lose nor repeat them.
            in_flight = job.batch_in_flight()
            if in_flight is None and waited < 2 * SPARK_SHARP_WAIT_S:
                return None
            if in_flight is not None and (armed[0] != in_flight):
                armed[:] = [in_flight, _output(written)]
                return None
            sink_wrote = _output(written) - armed[1]
            if sink_wrote <= 0 and waited < SPARK_SHARP_WAIT_S:
                return None
            f.fired_at = time.monotonic()
            pids = job.kill()
            where = (f"inside micro-batch {in_flight} (planned, not committed; its sink tasks had written {sink_wrote} "
                     "records)" if in_flight is not None else "between micro-batches")
            f.detail = f"Spark SIGKILL in batch {in_flight}" if in_flight is not None else "Spark SIGKILL between batches"
            event(f"[red]SIGKILL Spark[/red] {where}: driver, JVM and Python workers ({len(pids)} processes); {seen}")
            job.start()
            event("Spark restarting from its checkpoint")
        elif what == "broker":
            leaders = _leaders(cluster.bootstrap_servers)
            node = max(leaders, key=lambda n: len(leaders[n]))
            i = next(k for k, b in enumerate(cluster.brokers) if b.node_id == node)
            b = cluster.brokers[i]
            old = b.pid
            f.fired_at = time.monotonic()
            b.kill()
            f.detail = f"broker {node} SIGKILL"
            event(f"[red]SIGKILL broker {node}[/red] (pid {old}), leader of {', '.join(leaders[node])}; {seen}")
            time.sleep(1.0)
            cluster.restart_broker(i)  # retried until its old session has expired (bounded)
            event(f"broker {node} restarted (pid {b.pid}); leaders now: "
                  + "; ".join(f"broker {n}: {len(ps)}" for n, ps in sorted(_leaders(cluster.bootstrap_servers).items())))
        else:
            old = s3.proc.pid if s3.proc else None
            f.fired_at = time.monotonic()
            s3.kill()
            f.detail = f"SeaweedFS SIGKILL, {args.outage:g}s"
            event(f"[red]SIGKILL SeaweedFS[/red] (pid {old}): no object store for {args.outage:g}s; {seen}")
            time.sleep(args.outage)
            out, committed = _output(watcher) - f.output_at_fire, len(gen.committed) - f.committed_at_fire
            s3.start()
            event(f"SeaweedFS restarted (serving after {s3.last_start_s:.1f}s); while it was down the generator "
                  f"committed {committed} orders and the output grew by {out}")
        f.over_at = time.monotonic()
        f.committed_at_over = len(gen.committed)
        return f

    def status() -> Table:
        t = Table.grid(padding=(0, 2))
        last = "none yet" if job.last_batch is None else str(job.last_batch)
        t.add_row("Spark", f"{job.state}; run {job.runs}; last micro-batch {last}")
        t.add_row("cluster", ", ".join(f"broker {b.node_id} {'up' if b.running else 'DOWN'}" for b in cluster.brokers)
                  + f"; SeaweedFS {'up' if s3.running else 'DOWN'}")
        t.add_row("generator", f"{len(gen.committed):,} committed, {len(gen.aborted):,} aborted on purpose"
                  + (f", {gen.retries} retried" if gen.retries else ""))
        return t

    def view() -> Group:
        progress.update(bar_orders, completed=len(gen.committed))
        progress.update(bar_out, completed=_output(watcher))
        return Group(progress, status(), *events[shown_from:][-16:])

    wait_since: float | None = None
    with Live(view(), console=console, refresh_per_second=4, transient=False) as screen:
        while True:
            # Quicker while the Spark kill waits for its moment (a sink transaction is open for
            # a few hundred milliseconds).
            time.sleep(0.05 if pending and pending[0][1] == "spark" and wait_since else 0.25)
            screen.update(view())
            now = time.monotonic()
            if not gen_thread.is_alive() and not gen.done and (job.state == "running" or now - t0 > GENERATOR_START_LIMIT_S):
                gen_thread.start()
                event(f"generator started: {args.orders:,} orders, {ORDERS_PER_TXN} per transaction, {args.rate:g}/s")
            if gen.error:
                event(f"[red]generator failed: {gen.error}[/red]")
                break
            for f in done:  # what the pipeline saw: the output's first growth after the fault
                if f.output_resumed_at is None and now > f.over_at and _output(watcher) > f.output_at_fire:
                    f.output_resumed_at = now
                    f.retried = gen.retries - f.retries_at_fire
                    event(f"after the {f.what} fault: output growing again {now - f.fired_at:.1f}s after it fired; "
                          f"{f.retried} generator transaction(s) aborted and written again")
            if pending and len(gen.committed) / args.orders >= pending[0][0] and live(now):
                wait_since = wait_since or now
                fault = inject(pending[0][1], now - wait_since)
                if fault is not None:
                    done.append(fault)
                    pending.pop(0)
                    wait_since = None
            if not job.restart_if_exited(event):
                break
            if gen.done and done_at is None:
                done_at = now
                event("generator finished; waiting for the pipeline to catch up")
            slow = bool(pending) and len(gen.committed) >= SLOW_FROM * args.orders
            if slow != (gen.rate < args.rate):
                gen.rate = args.rate / 4 if slow else args.rate
                event(f"generator at {gen.rate:g} orders/s " + ("until the faults still to come have landed" if slow
                                                                else "again"))
            if gen.done and pending:
                for _, what in pending:
                    event(f"[red]the {what} fault could not land while the generator ran (the pipeline was not live "
                          "in time): this run proves nothing about it[/red]")
                    unfired.append(what)
                pending.clear()
            resumed = all(f.output_resumed_at is not None for f in done)
            if gen.done and not gen.error and resumed and _output(watcher) >= len(gen.committed):
                time.sleep(2.0)  # one more trigger interval: a duplicate would show up
                screen.update(view())
                event("all output visible; stopping the pipeline")
                break
            if (done_at and now - done_at > DRAIN_LIMIT_S) or now - t0 > DEMO_LIMIT_S:
                event("[red]time limit reached[/red]; checking what is there")
                break
        job.stop()
        screen.update(view())
    return done, unfired


def _fault_table(faults: list[Fault], job: SparkJob, work: Path, t0: float) -> Table:
    """One row per fault: when, the pipeline's state then, and what it saw until the next one."""
    table = Table(title="faults, each while the generator wrote and Spark ran (3 brokers, diskless topics)")
    for col in ("fault", "at", "output / committed", "over after", "output again after", "committed until over",
                "retried txns", "longest batch after (median before)", "client errors in Spark log"):
        table.add_column(col, justify="left" if col == "fault" else "right")
    end_logs = _spark_logs(work)
    for i, f in enumerate(faults):
        nxt = faults[i + 1] if i + 1 < len(faults) else None
        until = nxt.fired_at if nxt else float("inf")
        before = sorted(ms for t, _, _, ms in job.history if t < f.fired_at)
        after = [(ms, b) for t, b, _, ms in job.history if f.fired_at <= t < until]
        median = f"{before[len(before) // 2] / 1000:.1f}s" if before else "-"
        longest = f"{max(after)[0] / 1000:.1f}s, batch {max(after)[1]} ({median})" if after else f"- ({median})"
        resumed = f"{f.output_resumed_at - f.fired_at:.1f}s" if f.output_resumed_at else "[red]never[/red]"
        errors = _client_errors(f.spark_logs, nxt.spark_logs if nxt else end_logs, work)
        table.add_row(f.detail, f"{f.fired_at - t0:.0f}s", f"{f.output_at_fire:,} / {f.committed_at_fire:,}",
                      f"{f.over_at - f.fired_at:.1f}s", resumed, f"{f.committed_at_over - f.committed_at_fire:,}",
                      str(f.retried), longest, str(errors))
    return table


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C / SIGTERM: every process was stopped on the way out
        print("interrupted; every process the demo started is stopped", file=sys.stderr)
        sys.exit(130)
