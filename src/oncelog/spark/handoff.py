"""Hand the input ranges a task read over to the same task's exactly-once writer.

Why: when one Spark task both reads ranges from the ``oncelog`` source and writes the sink
(a plan without a shuffle between them: map, filter, union, coalesce), the output of that task
is derived from exactly those ranges, so the writer can commit the input offsets in the same
transaction as the output (the consume-transform-produce pattern). Spark runs the source's
``read`` and the sink's ``write`` of one task in two different Python worker processes on the
same executor, so they cannot share memory; they share the executor's local disk.

How: ``read_range`` calls ``record`` after it has delivered a whole range; the file is named by
the task attempt (query id, batch id, stage, partition, task attempt id — unique within an
application; the query id is a UUID, so also across applications). The writer calls
``collect`` after its input iterator is exhausted: by then the reader's worker has finished its
output (Spark pulls the reader's rows through the task before the writer sees end of input),
so every range the task read completely is on disk. A range the task did not read to the end
(e.g. under ``limit``) is never recorded, so its offsets are never committed.

A task whose write is not the exactly-once sink leaves its files behind; ``record`` deletes
files older than ``MAX_AGE_S`` as it goes, so the directory stays small.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

MAX_AGE_S = 3600.0
#: ``record`` scans for old files at most this often per process.
PRUNE_EVERY_S = 60.0
_last_prune = 0.0


def base_dir() -> Path:
    root = os.environ.get("ONCELOG_SPARK_HANDOFF_DIR") or os.path.join(tempfile.gettempdir(), f"oncelog-spark-handoff-{os.getuid()}")
    return Path(root)


def task_key() -> str | None:
    """The current streaming task attempt's key, or None outside a streaming task."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    tc = TaskContext.get()
    if tc is None:
        return None
    query = tc.getLocalProperty("sql.streaming.queryId")
    batch = tc.getLocalProperty("streaming.sql.batchId")
    if not query or batch is None:
        return None
    return f"{query}.{batch}.{tc.stageId()}.{tc.partitionId()}.{tc.taskAttemptId()}"


def record(topic: str, partition: int, end: int, *, key: str | None = None, root: Path | None = None) -> None:
    """Note that the current task read ``topic``/``partition`` completely up to ``end``."""
    key = key or task_key()
    if key is None:
        return
    root = root or base_dir()
    d = root / key
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps({"topic": topic, "partition": partition, "end": end}))
    tmp.rename(d / f"{uuid.uuid4().hex}.json")
    _prune(root)


def collect(*, key: str | None = None, root: Path | None = None) -> dict[tuple[str, int], int]:
    """The ranges the current task read completely, as {(topic, partition): end}; forgets them."""
    key = key or task_key()
    if key is None:
        return {}
    d = (root or base_dir()) / key
    out: dict[tuple[str, int], int] = {}
    if not d.is_dir():
        return out
    for f in d.glob("*.json"):
        entry = json.loads(f.read_text())
        tp = (entry["topic"], int(entry["partition"]))
        out[tp] = max(out.get(tp, 0), int(entry["end"]))
    shutil.rmtree(d, ignore_errors=True)
    return out


def _prune(root: Path) -> None:
    global _last_prune
    now = time.time()
    if now - _last_prune < PRUNE_EVERY_S:
        return
    _last_prune = now
    cutoff = now - MAX_AGE_S
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return
    for e in entries:
        try:
            if e.stat().st_mtime < cutoff:
                shutil.rmtree(e.path, ignore_errors=True)
        except FileNotFoundError:
            continue
