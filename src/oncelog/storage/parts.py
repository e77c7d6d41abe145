"""What a read of any storage engine returns (storage/engine.py): whole batches as a list of
parts, each a range of a file (sent with sendfile) or bytes already in memory. Neutral: it
depends on no engine, so the contract, the engines and the fetch path can all import it."""

from __future__ import annotations

from typing import NamedTuple, Union

__all__ = ["FileSlice", "ReadPart", "part_length", "parts_length"]

class FileSlice(NamedTuple):
    """A byte range of a segment file: ``fd`` stays valid for at least file.delete.delay.ms after
    the segment is deleted (not after ``PartitionLog.close``/``delete`` without delay)."""

    fd: int
    position: int
    length: int


#: One piece of a read: a range of a log file, or bytes already in memory (whole batches).
ReadPart = Union[FileSlice, bytes]


def part_length(part: ReadPart) -> int:
    return len(part) if isinstance(part, (bytes, bytearray, memoryview)) else part.length


def parts_length(parts: list[ReadPart]) -> int:
    return sum(part_length(p) for p in parts)
