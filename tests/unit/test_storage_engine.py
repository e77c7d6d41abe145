"""The storage engine interface (storage/engine.py): the local-files engine implements it with
the same signatures, and the read parts of either kind are measured alike (issue 15)."""

from __future__ import annotations

import inspect

from oncelog.storage import engine, parts
from oncelog.storage.parts import FileSlice
from oncelog.storage.engines.local.log import PartitionLog


def _members(cls: type) -> set[str]:
    return {n for n in vars(cls) if not n.startswith("_")}


def _engines() -> list[type]:
    from oncelog.storage.engines.diskless.log import DisklessPartitionLog
    from oncelog.storage.engines.postgres.log import PgPartitionLog

    return [PartitionLog, PgPartitionLog, DisklessPartitionLog]


def test_partition_log_implements_the_engine_protocol() -> None:
    wanted = _members(engine.PartitionEngine)
    for cls in _engines():
        _implements(cls, wanted)


def _implements(cls: type, wanted: set[str]) -> None:
    assert wanted <= set(dir(cls)), (cls, wanted - set(dir(cls)))
    for name in wanted:
        proto = inspect.getattr_static(engine.PartitionEngine, name)
        impl = inspect.getattr_static(cls, name)
        if isinstance(proto, property):
            assert isinstance(impl, property), name
            continue
        assert list(inspect.signature(proto).parameters) == list(inspect.signature(impl).parameters)[: len(
            inspect.signature(proto).parameters)], (cls, name)


def test_parts_length_measures_slices_and_chunks() -> None:
    assert parts.parts_length([FileSlice(3, 0, 100), b"x" * 7, FileSlice(3, 100, 5)]) == 112
    assert parts.parts_length([]) == 0
