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
from rich.console import Console
from rich.table import Table

from oncelog.verify.checker import Anomaly

verify_app = typer.Typer(no_args_is_help=True, help="Fault-injection scenarios that check exactly-once.")
console = Console()


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
    from oncelog.verify import torn

    s = _seed(seed)
    work = work_dir or Path(tempfile.mkdtemp(prefix="oncelog-verify-torn-"))
    console.print(f"torn writes: {rounds} rounds, seed {s}, files in {work}")
    r = torn.run(work, rounds=rounds, seed=s, per_round=records)
    rows = [("rounds", str(r.rounds)), ("acknowledged records", str(r.acked)), ("aborted records", str(r.aborted))]
    rows += [(f"fault: {k}", str(v)) for k, v in sorted(r.faults.items())]
    rows.append(("wall time", f"{r.seconds:.1f} s"))
    raise typer.Exit(report("torn writes", s, rows, r.anomalies))
