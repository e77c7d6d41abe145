"""``oncelog transactions``: see and repair transactions (KIP-664), with the words and flags of
Kafka's ``kafka-transactions.sh`` where it has them. The work is ``admin.transactions``; this
module parses options and prints (rich tables, or ``--json`` for scripts).

``find-hanging`` prints, for each hanging transaction, why it hangs and the arguments that
``abort`` takes (``--topic T --partition P --start-offset O``).
"""

from __future__ import annotations

import time
from typing import Any, Optional

import typer

from oncelog.admin.transactions import DEFAULT_MAX_TXN_TIMEOUT_MS, NotHanging, TransactionsAdmin, parse_partition
from oncelog.cli_output import Table, console, emit_json, fail
from oncelog.protocol.errors import KafkaError

app = typer.Typer(no_args_is_help=True, help="List, describe and abort transactions; find hanging ones (KIP-664).")
BOOTSTRAP = typer.Option("127.0.0.1:9092", "--bootstrap-server", "-b", help="HOST:PORT of a broker")
JSON = typer.Option(False, "--json", help="print JSON (for scripts) instead of a table")


_emit = emit_json
_fail = fail


def _table(title: str | None, cols: list[str], rows: list[list[Any]]) -> None:
    t = Table(title=title)
    for c in cols:
        t.add_column(c)
    for r in rows:
        t.add_row(*(str(x) for x in r))
    console.print(t)


@app.command("list")
def list_(
    bootstrap: str = BOOTSTRAP,
    state: list[str] = typer.Option([], "--state", help="only transactions in this state (Kafka's name; repeatable)"),
    producer_id: list[int] = typer.Option([], "--producer-id", help="only this producer id (repeatable)"),
    duration_ms: int = typer.Option(-1, "--duration-filter", help="only transactions running longer than this (ms)"),
    pattern: Optional[str] = typer.Option(None, "--transactional-id-pattern", help="regular expression (whole id)"),
    as_json: bool = JSON,
) -> None:
    """Every transaction of every broker (each coordinates some transactional ids)."""
    with TransactionsAdmin(bootstrap) as a:
        rows, problems = a.list(states=state, producer_ids=producer_id, duration_ms=duration_ms, pattern=pattern)
    if as_json:
        _emit({"transactions": [r.to_json() for r in rows], "problems": {str(k): v for k, v in problems.items()}})
        return
    _table(None, ["transactional id", "coordinator", "producer id", "state"],
           [[r.transactional_id, r.coordinator_id, r.producer_id, r.state] for r in rows])
    for node, problem in problems.items():
        console.print(f"[yellow]broker {node}: {problem}[/yellow]", highlight=False)


@app.command("describe")
def describe(
    transactional_id_arg: Optional[str] = typer.Argument(None, metavar="ID"),
    transactional_id: Optional[str] = typer.Option(None, "--transactional-id"),
    bootstrap: str = BOOTSTRAP,
    as_json: bool = JSON,
) -> None:
    """One transactional id's state, as its coordinator has it."""
    tid = transactional_id or transactional_id_arg
    if not tid:
        _fail("give a transactional id (ID or --transactional-id)", as_json, 2)
    try:
        with TransactionsAdmin(bootstrap) as a:
            d = a.describe(tid)  # type: ignore[arg-type]
    except KafkaError as exc:
        _fail(f"cannot describe {tid!r}: {exc.code.name.upper()} ({exc})", as_json)
    if as_json:
        _emit(d.to_json())
        return
    age = f"{(time.time() * 1000 - d.start_time_ms) / 1000:.1f} s" if d.start_time_ms > 0 else "-"
    _table(None, ["coordinator", "transactional id", "producer id", "producer epoch", "state", "timeout ms",
                  "start time ms", "duration", "partitions"],
           [[d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms,
             d.start_time_ms, age, ",".join(f"{t}-{p}" for t, p in d.partitions)]])


@app.command("producers")
def producers(
    topic_arg: Optional[str] = typer.Argument(None, metavar="TOPIC[-P]"),
    topic: Optional[str] = typer.Option(None, "--topic"),
    partition: Optional[int] = typer.Option(None, "--partition"),
    bootstrap: str = BOOTSTRAP,
    as_json: bool = JSON,
) -> None:
    """The producers each partition's leader remembers (kafka-transactions.sh describe-producers)."""
    if topic is None and topic_arg is not None:
        topic, parsed = parse_partition(topic_arg)
        partition = parsed if partition is None else partition
    if topic is None:
        _fail("give a topic (TOPIC[-P] or --topic)", as_json, 2)
    try:
        with TransactionsAdmin(bootstrap) as a:
            rows, errors = a.producers(topic, partition)
    except KafkaError as exc:
        _fail(f"cannot describe producers of {topic}: {exc.code.name.upper()}", as_json)
    if as_json:
        _emit({"producers": [r.to_json() for r in rows], "errors": errors})
        return
    _table(None, ["topic", "partition", "producer id", "epoch", "last sequence", "last timestamp",
                  "coordinator epoch", "current txn start offset"],
           [[r.topic, r.partition, r.producer_id, r.producer_epoch, r.last_sequence, r.last_timestamp,
             r.coordinator_epoch, r.current_txn_start_offset] for r in rows])
    for tp, e in errors.items():
        console.print(f"[yellow]{tp}: {e}[/yellow]", highlight=False)


@app.command("find-hanging")
def find_hanging(
    bootstrap: str = BOOTSTRAP,
    topic: Optional[str] = typer.Option(None, "--topic", help="only this topic (default: every topic)"),
    partition: Optional[int] = typer.Option(None, "--partition"),
    max_timeout_ms: int = typer.Option(DEFAULT_MAX_TXN_TIMEOUT_MS, "--max-transaction-timeout",
                                       help="transaction.max.timeout.ms of the brokers (ms)"),
    as_json: bool = JSON,
) -> None:
    """Open transactions that no coordinator will finish: each with why, and what abort takes."""
    try:
        with TransactionsAdmin(bootstrap) as a:
            found, errors = a.find_hanging(int(time.time() * 1000), topic=topic, partition=partition,
                                           max_timeout_ms=max_timeout_ms)
    except KafkaError as exc:
        _fail(f"cannot look for hanging transactions: {exc.code.name.upper()} ({exc})", as_json)
    if as_json:
        _emit({"hanging": [h.to_json() for h in found], "errors": errors})
        return
    for tp, e in errors.items():
        console.print(f"[yellow]{tp}: not read ({e})[/yellow]", highlight=False)
    if not found:
        console.print("no hanging transactions")
        return
    _table("hanging transactions", ["topic", "partition", "producer id", "epoch", "coordinator epoch",
                                    "start offset", "transactional id", "why", "abort with"],
           [[h.producer.topic, h.producer.partition, h.producer.producer_id, h.producer.producer_epoch,
             h.producer.coordinator_epoch, h.producer.current_txn_start_offset, h.transactional_id or "-",
             h.reason, "oncelog transactions abort " + " ".join(h.abort_args)] for h in found])


@app.command("abort")
def abort(
    topic: str = typer.Option(..., "--topic"),
    partition: int = typer.Option(..., "--partition"),
    start_offset: Optional[int] = typer.Option(None, "--start-offset",
                                               help="first offset of the open transaction (looked up as Kafka's abort)"),
    producer_id: Optional[int] = typer.Option(None, "--producer-id"),
    producer_epoch: Optional[int] = typer.Option(None, "--producer-epoch"),
    coordinator_epoch: Optional[int] = typer.Option(None, "--coordinator-epoch"),
    max_timeout_ms: int = typer.Option(DEFAULT_MAX_TXN_TIMEOUT_MS, "--max-transaction-timeout",
                                       help="transaction.max.timeout.ms of the brokers (ms), as find-hanging"),
    force: bool = typer.Option(False, "--force", help="also abort a transaction that is NOT hanging: a live one is "
                               "aborted whole through its coordinator and its producer FENCED (its next request and "
                               "commit fail with PRODUCER_FENCED; the application must restart it); when the "
                               "coordinators cannot be asked, the bare marker is written, which can tear a live "
                               "transaction (docs/TRANSACTIONS.md)"),
    bootstrap: str = BOOTSTRAP,
    as_json: bool = JSON,
) -> None:
    """Abort a HANGING transaction on one partition (as find-hanging says): write an ABORT marker at
    its leader. A transaction that is not hanging is refused unless --force (see its help)."""
    now = int(time.time() * 1000)
    try:
        with TransactionsAdmin(bootstrap) as a:
            try:
                if start_offset is not None:
                    p = a.abort_at(topic, partition, start_offset, now_ms=now, max_timeout_ms=max_timeout_ms,
                                   force=force)  # the web console's abort calls this too (never forced)
                    pid, epoch, ce = p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0)
                elif producer_id is not None and producer_epoch is not None and coordinator_epoch is not None:
                    pid, epoch, ce = producer_id, producer_epoch, coordinator_epoch
                    a.abort_producer(topic, partition, pid, epoch, ce, now_ms=now, max_timeout_ms=max_timeout_ms,
                                     force=force)
                else:
                    _fail("give --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch", as_json, 2)
            except LookupError as exc:
                _fail(str(exc), as_json)
            except NotHanging as exc:
                _fail(f"refused: {exc}; give --force to abort it anyway", as_json)
    except KafkaError as exc:
        _fail(f"abort refused: {exc.code.name.upper()} ({exc})", as_json)
    result = {"aborted": True, "topic": topic, "partition": partition, "producer_id": pid, "producer_epoch": epoch,
              "coordinator_epoch": ce}
    if as_json:
        _emit(result)
    else:
        console.print(f"aborted the transaction of producer {pid} (epoch {epoch}) on {topic}-{partition}",
                      highlight=False)
