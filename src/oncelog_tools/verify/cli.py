"""``oncelog verify …``: fault scenarios that check the exactly-once claims, repeatably.

Each command prints a table of operations, faults injected and anomalies found, prints its seed
so a failing run can be replayed (``--seed``), and exits 1 on any anomaly. docs/RELIABILITY.md
lists the full-size commands and the figures of the last full run.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Optional

import typer

from oncelog.cli_output import Table, console
from oncelog_tools.verify.checker import Anomaly

verify_app = typer.Typer(no_args_is_help=True, help="Fault-injection scenarios that check exactly-once.")


def _seed(seed: Optional[int]) -> int:
    return seed if seed is not None else random.SystemRandom().randrange(1, 2**31)


def report(title: str, seed: int, rows: list[tuple[str, str]], anomalies: list[Anomaly]) -> int:
    table = Table(title=f"{title} (seed {seed})")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(k, v)
    kinds: dict[str, int] = {}
    for a in anomalies:
        kinds[a.kind] = kinds.get(a.kind, 0) + 1
    table.add_row("anomalies", str(len(anomalies)) + (f" ({', '.join(f'{k} {n}' for k, n in kinds.items())})" if kinds else ""))
    console.print(table)
    for a in anomalies[:50]:
        console.print(f"[red]{a.kind}[/red] {a.detail}", highlight=False)
    if anomalies:
        console.print(f"[bold red]FAIL[/bold red] — replay with --seed {seed}")
        return 1
    console.print("[bold green]PASS[/bold green]")
    return 0


@verify_app.command("torn")
def torn_cmd(
    rounds: int = typer.Option(10, help="write / crash / damage / restart rounds"),
    records: int = typer.Option(200, help="records per round and producer"),
    seed: Optional[int] = typer.Option(None, help="replay a run"),
    work_dir: Optional[Path] = typer.Option(None, help="keep the broker's files here"),
) -> None:
    """Scenario 3: torn writes and damaged indexes, snapshots and transaction indexes."""
    from oncelog_tools.verify import torn

    s = _seed(seed)
    work = work_dir or Path(tempfile.mkdtemp(prefix="oncelog-verify-torn-"))
    console.print(f"torn writes: {rounds} rounds, seed {s}, files in {work}")
    r = torn.run(work, rounds=rounds, seed=s, per_round=records)
    rows = [("rounds", str(r.rounds)), ("acknowledged records", str(r.acked)), ("aborted records", str(r.aborted))]
    rows += [(f"fault: {k}", str(v)) for k, v in sorted(r.faults.items())]
    rows.append(("wall time", f"{r.seconds:.1f} s"))
    raise typer.Exit(report("torn writes", s, rows, r.anomalies))


@verify_app.command("copy")
def copy_cmd(
    records: int = typer.Option(100_000, help="input records"),
    partitions: int = typer.Option(4, help="input/output partitions (one copier each)"),
    broker_kills: int = typer.Option(10, help="SIGKILLs of the broker"),
    copier_kills: int = typer.Option(10, help="SIGKILLs of copiers"),
    seed: Optional[int] = typer.Option(None, help="replay a run"),
    time_limit: float = typer.Option(900.0, help="seconds before unfinished copiers count as a failure"),
    work_dir: Optional[Path] = typer.Option(None, help="keep the broker's and copiers' files here"),
    txn_records: int = typer.Option(500, help="records per transaction at most"),
    txn_pause_ms: int = typer.Option(0, help="each copier pauses this long after every transaction (spreads a "
                                     "long run's faults over more transactions)"),
    cluster: int = typer.Option(0, "--cluster", help="run on this many brokers sharing a PostgreSQL started here "
                                "(faults: broker SIGKILL/SIGSTOP, PostgreSQL restarts); 0: one embedded broker"),
    diskless: bool = typer.Option(False, "--diskless", help="with --cluster: diskless input and output topics on a "
                                  "SeaweedFS started here (one more fault: SeaweedFS SIGKILL + restart)"),
    store_faults: int = typer.Option(0, "--store-faults", help="with --diskless: object-store fault windows of a "
                                     "loopback S3 proxy between the brokers and SeaweedFS (delays under and past "
                                     "the request timeout, 503 SlowDown, 500 after the write, resets mid-request "
                                     "and mid-response; verify/store_faults.py)"),
) -> None:
    """Scenario 1: transactional copy while the broker and the copiers are SIGKILLed (Kafka's
    transactions_test.py), with a concurrent read_committed reader."""
    from oncelog_tools.verify import copy

    if diskless and not cluster:
        console.print("--diskless needs --cluster N (diskless topics need cluster mode)")
        raise typer.Exit(2)
    if store_faults and not diskless:
        console.print("--store-faults needs --diskless")
        raise typer.Exit(2)

    s = _seed(seed)
    work = work_dir or Path(tempfile.mkdtemp(prefix="oncelog-verify-copy-"))
    work.mkdir(parents=True, exist_ok=True)
    console.print(f"transactional copy: {records} records, {partitions} copiers, seed {s}, files in {work}")
    s3 = proxy = faults = None
    store: dict = {}
    if diskless:
        from oncelog.testing.seaweedfs import SeaweedServer

        s3 = SeaweedServer(work / "seaweedfs").start()
        endpoint = s3.endpoint
        if store_faults:
            from oncelog.testing.s3_fault_proxy import S3FaultProxy
            from oncelog_tools.verify.store_faults import BROKER_PROPERTIES, StoreFaults

            proxy = S3FaultProxy(s3.s3_port, seed=s).start()
            faults = StoreFaults(proxy)
            endpoint = proxy.endpoint

        def store_fault() -> str:
            s3.kill()
            s3.start()
            return "object store SIGKILL + restart"

        store = {"diskless": {"diskless.storage.url": f"s3://{s3.bucket}/copy",
                              "diskless.storage.endpoint": endpoint, **(BROKER_PROPERTIES if faults else {})},
                 "diskless_env": s3.env(), "store_fault": store_fault}
        if faults is not None:
            store.update(store_faults=store_faults, proxy_fault=faults.draw)
    try:
        with console.status("copying") as status:
            def progress(done: int, total: int, r: "copy.CopyResult") -> None:
                status.update(f"copiers done {done}/{total}; broker kills {r.broker_kills}, copier kills "
                              f"{r.copier_kills}, store faults {r.store_faults}, restarts {r.copier_restarts}, "
                              f"watchdog {r.watchdog_kills}")

            r = copy.run(work, records=records, partitions=partitions, broker_kills=broker_kills,
                         copier_kills=copier_kills, seed=s, time_limit=time_limit, progress=progress, cluster=cluster,
                         txn_records=txn_records, txn_pause_ms=txn_pause_ms, **store)
    finally:
        if proxy is not None:
            proxy.close()
        if s3 is not None:
            s3.close()
    rows = [
        ("input records", str(r.records)), ("output records (read_committed)", str(r.copied)),
        ("records seen by the concurrent reader", str(r.reader_records)),
        ("the concurrent reader's last record, into the run", f"{r.reader_last_s:.0f} s"),
        *[(f"fault: {kind}", str(n)) for kind, n in sorted(r.faults.items())], ("fault: copier SIGKILL", str(r.copier_kills)),
        ("copier restarts after a client error", str(r.copier_restarts)),
        ("copiers killed by the watchdog (client hang, librdkafka #5456)", str(r.watchdog_kills)),
    ]
    if faults is not None:
        rows += [("object-store requests hit by the proxy", faults.requests_hit()),
                 ("proxy windows past the call deadline (calls failed)", str(faults.past_deadline))]
    rows.append(("wall time", f"{r.seconds:.1f} s"))
    raise typer.Exit(report("transactional copy", s, rows, r.anomalies))


@verify_app.command("queue")
def queue_cmd(
    duration: float = typer.Option(600.0, help="seconds of workload and faults"),
    clients: int = typer.Option(4, help="client processes"),
    partitions: int = typer.Option(4, help="partitions of the queue topic"),
    max_faults: int = typer.Option(10_000, help="faults at most"),
    disk_mb: int = typer.Option(256, help="size of the tmpfs holding the broker's data (disk-full fault)"),
    seed: Optional[int] = typer.Option(None, help="replay a run"),
    work_dir: Optional[Path] = typer.Option(None, help="keep the broker's files and the history here"),
) -> None:
    """Scenario 2: a Jepsen-style queue workload (transactions of sends and polls, random aborts)
    under broker/client kills and pauses, cut and delayed connections and a full disk; the
    history is checked for lost, duplicate, aborted/uncommitted reads and ordering anomalies."""
    from oncelog_tools.verify import queue

    s = _seed(seed)
    work = work_dir or Path(tempfile.mkdtemp(prefix="oncelog-verify-queue-"))
    console.print(f"queue workload: {duration:.0f} s, {clients} clients, seed {s}, files in {work}")
    with console.status("running") as status:
        def progress(elapsed: float, total: float, r: "queue.QueueResult") -> None:
            status.update(f"{elapsed:.0f}/{total:.0f} s; faults {sum(r.faults.values())}, "
                          f"client restarts {r.client_restarts}")

        r = queue.run(work, duration=duration, clients=clients, partitions=partitions, seed=s,
                      max_faults=max_faults, disk_mb=disk_mb, progress=progress)
    rows = [
        ("operations", str(r.ops)), ("transactions committed / aborted / unknown", f"{r.committed} / {r.aborted} / {r.unknown}"),
        ("values sent", str(r.sends)), ("records polled", str(r.polled)), ("records in the final read", str(r.final_records)),
        ("data disk", r.disk),
    ]
    rows += [(f"fault: {k}", str(v)) for k, v in r.faults.items()]
    rows += [("client restarts after a client error", str(r.client_restarts)),
             ("clients killed by the watchdog (client hang)", str(r.watchdog_kills)),
             ("history", str(work / "history.jsonl")), ("wall time", f"{r.seconds:.1f} s")]
    for n in r.notes:
        console.print(f"note: {n}")
    raise typer.Exit(report("queue workload", s, rows, r.anomalies))
