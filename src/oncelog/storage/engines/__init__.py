"""The storage engines: each keeps partitions' record batches its own way behind the one contract
``storage/engine.py`` (``PartitionEngine``). ``local/``: segment files on the broker's disk (the
embedded broker); ``postgres/``: rows in the cluster's PostgreSQL store, appended by a group
commit (cluster mode); ``diskless/``: batches in an object store, their coordinates in the
cluster's store, committed one object per interval (issue 29, topics with ``diskless.enable``;
its object-store services are ``oncelog/diskless/``'s, seen through protocols).

What every engine shares — the log configuration (``storage/config.py``), the read parts
(``storage/parts.py``), the keep rules of compaction (``storage/keep_rules.py``), leader epochs,
the producer state and the aborted-transaction index — lives one level up, in storage/, and so
does what the two store-backed engines share (their leader log, ``storage/store_log.py``, and
its awaitable, ``storage/store_pending.py``); no engine imports another.

``open_engine(spec)`` is the one place an engine is built: the spec names the engine and what
it needs (``LocalSpec``, ``PostgresSpec``, ``DisklessSpec``). Each engine's module is imported
only when one of its logs is opened, so the embedded broker never imports the cluster's
(psycopg: the ``cluster`` extra).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union, overload

from oncelog.storage.config import LogConfig

if TYPE_CHECKING:
    from oncelog.cluster.connection import StoreConnection
    from oncelog.cluster.leadership import Leadership
    from oncelog.storage.engines.diskless.log import DisklessPartitionLog, ObjectCommitter, ReadCache
    from oncelog.storage.engines.local.log import PartitionLog
    from oncelog.storage.engines.postgres.group_commit import GroupCommitter
    from oncelog.storage.engines.postgres.log import PgPartitionLog

__all__ = ["DisklessSpec", "EngineSpec", "LocalSpec", "PostgresSpec", "open_engine"]


@dataclass(frozen=True, slots=True)
class LocalSpec:
    """A partition's log in segment files under ``path`` (created if need be, recovered)."""

    path: Path
    config: LogConfig
    now_ms: int


@dataclass(frozen=True, slots=True)
class PostgresSpec:
    """A partition led under ``lead`` with its batches in rows of the store: ``store`` is the
    reader connection of the opening thread, ``committer`` the broker's group committer,
    ``compactor`` the connection compaction passes run with (None: no compaction)."""

    store: StoreConnection
    committer: GroupCommitter
    lead: Leadership
    config: LogConfig
    compactor: StoreConnection | None = None


@dataclass(frozen=True, slots=True)
class DisklessSpec:
    """A diskless partition led under ``lead``: its batches go through the broker's object
    ``writer`` and are read through its ``cache``."""

    store: StoreConnection
    writer: ObjectCommitter
    cache: ReadCache
    lead: Leadership
    config: LogConfig


EngineSpec = Union[LocalSpec, PostgresSpec, DisklessSpec]


@overload
def open_engine(spec: LocalSpec) -> PartitionLog: ...


@overload
def open_engine(spec: PostgresSpec) -> PgPartitionLog: ...


@overload
def open_engine(spec: DisklessSpec) -> DisklessPartitionLog: ...


def open_engine(spec: EngineSpec) -> PartitionLog | PgPartitionLog | DisklessPartitionLog:
    """Open the log ``spec`` describes, with the engine it names (see the engines' ``log.py``
    for what opening does: the local engine recovers its files; the store-backed ones start
    from ``lead``, the partition's row when this broker took the lead). Raises what the
    engine's opening raises (KafkaStorageError)."""
    if isinstance(spec, LocalSpec):
        from oncelog.storage.engines.local.log import PartitionLog

        return PartitionLog.open(spec.path, spec.config, spec.now_ms)
    if isinstance(spec, PostgresSpec):
        from oncelog.storage.engines.postgres.log import PgPartitionLog

        return PgPartitionLog(spec.store, spec.committer, spec.lead, spec.config, compactor=spec.compactor)
    if isinstance(spec, DisklessSpec):
        from oncelog.storage.engines.diskless.log import DisklessPartitionLog

        return DisklessPartitionLog(spec.store, spec.writer, spec.lead, spec.config, spec.cache)
    raise TypeError(f"not an engine spec: {spec!r}")
