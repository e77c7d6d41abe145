"""The object collector (issue 29, docs/DISKLESS.md §2.8): deletes the objects nothing points
into any more, and the orphans — objects uploaded but never committed (a broker killed or fenced
between upload and commit, a commit that failed or was refused outright).

One round (``collect``):

1. Mark: every ``oncelog_dl_object`` row without a coordinate pointing into it gets
   ``deletable_at`` (its batches went by retention, DeleteRecords or topic deletion — the
   cascade of the partition row — or were all refused at commit).
2. Sweep: objects marked more than ``grace_ms`` ago are deleted from the store, then their rows
   (a fetch that read their coordinates just before has that long to read the bytes).
3. Orphans: the store is listed under ``v1/`` in key order, which is creation-time order
   (UUIDv7 keys, diskless/layout.py), from after the last key the previous round judged up to
   the first key younger than ``grace_ms``; keys with no ``oncelog_dl_object`` row are deleted. The grace is far longer than an upload's deadline
   plus a commit, so an object whose commit is still in flight is never taken.

Every broker with an object store runs rounds (``every``); two rounds at once only repeat
deletes, which are idempotent. Each step is bounded (``page`` keys per statement and call).
The SQL runs on the caller's thread with its own connection (``StoreConnection``), the store
calls on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable

from oncelog.cluster.connection import StoreConnection
from oncelog.diskless import layout
from oncelog.diskless.object_store import ObjectStore
from oncelog.protocol.errors import KafkaError

__all__ = ["Collected", "collect"]

log = logging.getLogger(__name__)

PAGE = 1000


@dataclass
class Collected:
    marked: int = 0  # objects found unreferenced this round
    deleted: int = 0  # unreferenced objects deleted (past the grace)
    orphans: int = 0  # uploaded, never committed, deleted
    scanned_to: str | None = None  # the last key the orphan scan judged (the next round lists after it)


async def collect(store: ObjectStore, db: StoreConnection, *, grace_ms: int, now_ms: int, page: int = PAGE,
                  run: Callable | None = None, scanned_to: str | None = None) -> Collected:
    """One round; ``run(fn, *args)`` runs a blocking SQL call (default: a worker thread).
    ``scanned_to``: the orphan scan lists only the keys after it (the previous round's
    ``Collected.scanned_to``): every key before it was judged once its time was past the grace,
    when its upload had long ended (the grace is far longer than an upload's deadline), so each
    key is listed about once, not at every round."""
    call = run or asyncio.to_thread
    out = Collected()

    def mark() -> int:
        with db.transaction() as conn:
            return conn.execute(
                "UPDATE oncelog_dl_object o SET deletable_at = clock_timestamp() WHERE deletable_at IS NULL "
                "AND NOT EXISTS (SELECT 1 FROM oncelog_dl_batch b WHERE b.object_id = o.id)").rowcount

    def due() -> list[tuple[int, str]]:
        return [tuple(r) for r in db.query(  # type: ignore[misc]
            "SELECT id, object_key FROM oncelog_dl_object WHERE deletable_at < clock_timestamp() - "
            "make_interval(secs => %s) ORDER BY id LIMIT %s", (grace_ms / 1000.0, page))]

    def forget(ids: list[int]) -> None:
        with db.transaction() as conn:
            # a coordinate added since (never: keys are not reused) would keep its row
            conn.execute("DELETE FROM oncelog_dl_object o WHERE id = ANY(%s) AND NOT EXISTS "
                         "(SELECT 1 FROM oncelog_dl_batch b WHERE b.object_id = o.id)", (ids,))

    def known(keys: list[str]) -> set[str]:
        return {r[0] for r in db.query("SELECT object_key FROM oncelog_dl_object WHERE object_key = ANY(%s)",
                                       (keys,))}

    out.marked = await call(mark)
    while True:
        rows = await call(due)
        if not rows:
            break
        await store.delete([k for _, k in rows])
        await call(forget, [i for i, _ in rows])
        out.deleted += len(rows)
        if len(rows) < page:
            break
    cut = now_ms - grace_ms
    keys: list[str] = []
    out.scanned_to = scanned_to

    async def sweep(batch: list[str]) -> None:
        have = await call(known, batch)
        gone = [k for k in batch if k not in have]
        if gone:
            await store.delete(gone)
            out.orphans += len(gone)
            log.info("diskless: deleted %d orphan object(s) (uploaded, never committed)", len(gone))

    async for info in store.list(layout.KEY_PREFIX, start_after=scanned_to):
        t = layout.key_time_ms(info.key)
        if t is None:
            continue  # not ours
        if t > cut:
            break  # keys are in time order: the rest are younger
        keys.append(info.key)
        if len(keys) >= page:
            await sweep(keys)
            out.scanned_to = keys[-1]
            keys = []
    if keys:
        await sweep(keys)
        out.scanned_to = keys[-1]
    return out


async def every(interval_s: float, store: ObjectStore, db: StoreConnection, grace_ms: int,
                wall_ms: Callable[[], int]) -> None:
    """Run ``collect`` every ``interval_s`` until cancelled; failures are logged and retried
    at the next round."""
    scanned_to: str | None = None
    while True:
        await asyncio.sleep(interval_s)
        try:
            got = await collect(store, db, grace_ms=grace_ms, now_ms=wall_ms(), scanned_to=scanned_to)
            scanned_to = got.scanned_to
            if got.deleted or got.orphans:
                log.info("diskless collector: %d object(s) deleted, %d orphan(s) deleted", got.deleted, got.orphans)
        except (KafkaError, OSError) as exc:
            log.warning("diskless collector round failed (retried at the next): %s", exc)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a bug: keep the broker serving
            log.exception("diskless collector round failed")
