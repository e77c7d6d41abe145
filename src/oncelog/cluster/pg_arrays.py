"""Array parameters for PostgreSQL in its binary format, built column-wise at C speed.

Why. A statement that takes a whole round of rows as arrays (``oncelog_append``: thirteen arrays
of one element per batch) is cheap on the server, but psycopg builds a binary array in Python,
one call per element: about 1.5 µs an element, so a round of 60 batches spent over 1 ms of the
broker's CPU building its parameters, more than everything else the round cost. ``encode``
builds the same bytes with one ``struct`` call per column (``bytea[]``: one ``bytes.join``),
and the value goes to psycopg as a pre-encoded parameter: a small wrapper per array type whose
registered dumper hands the bytes over as they are (no copy), with the array's type OID.

The format (PostgreSQL's ``array_send``): ndim, has-nulls flag, element OID, then per dimension
its size and lower bound (1), then per element its length and bytes. One dimension, no NULLs;
an empty array has no dimension. Integers are big-endian; a ``bool`` is one byte.

Use: ``encode("int8", values)`` (``values`` any iterable of ints; ``bytea``: of bytes-like
objects) as the parameter of a ``%b`` placeholder, e.g. ``%b::int8[]``. ``ENCODERS`` lists the
element types it knows; ``encoder_for(type)`` answers None for another (the caller passes a
plain list, which psycopg adapts itself).
"""

from __future__ import annotations

import struct
from functools import lru_cache
from itertools import chain, repeat
from typing import Any, Callable, Iterable

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

__all__ = ["ENCODERS", "Encoded", "encode", "encoder_for"]

_HEAD = struct.Struct(">iiIii")  # ndim, flags, element oid, size, lower bound
_EMPTY = struct.Struct(">iiI")
_LEN = struct.Struct(">i")

#: element type: (element OID, array OID, struct code of one element, its length)
_TYPES: dict[str, tuple[int, int, str, int]] = {
    "int8": (20, 1016, "q", 8),
    "int4": (23, 1007, "i", 4),
    "int2": (21, 1005, "h", 2),
    "bool": (16, 1000, "?", 1),
    "bytea": (17, 1001, "", -1),
}


class Encoded:
    """A pre-encoded array parameter: ``data``, the array in PostgreSQL's binary format."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _array_class(name: str, array_oid: int) -> type[Encoded]:
    """The class a pre-encoded ``name[]`` travels as, its dumper registered on psycopg's global
    adapters (it adapts only this class: nothing else changes)."""
    cls = type(f"Binary_{name}_array", (Encoded,), {"__slots__": ()})
    dumper = type(f"Binary_{name}_array_dumper", (Dumper,), {
        "format": Format.BINARY, "oid": array_oid, "dump": lambda self, obj: obj.data,
    })
    psycopg.adapters.register_dumper(cls, dumper)
    return cls


_CLASSES = {name: _array_class(name, array_oid) for name, (_, array_oid, _, _) in _TYPES.items()}


@lru_cache(maxsize=512)
def _fixed(code: str, n: int) -> struct.Struct:
    """The struct of a whole one-dimensional array of ``n`` fixed-size elements of ``code``."""
    return struct.Struct(">iiIii" + ("i" + code) * n)


def _fixed_encoder(name: str) -> Callable[[Iterable[Any]], Encoded]:
    elem_oid, _, code, size = _TYPES[name]
    cls = _CLASSES[name]
    empty = cls(_EMPTY.pack(0, 0, elem_oid))

    def encode_fixed(values: Iterable[Any]) -> Encoded:
        vals = values if isinstance(values, (list, tuple)) else list(values)
        n = len(vals)
        if not n:
            return empty
        return cls(_fixed(code, n).pack(1, 0, elem_oid, n, 1, *chain.from_iterable(zip(repeat(size, n), vals))))

    return encode_fixed


def _encode_bytea(values: Iterable[Any]) -> Encoded:
    vals = values if isinstance(values, (list, tuple)) else list(values)
    n = len(vals)
    if not n:
        return _CLASSES["bytea"](_EMPTY.pack(0, 0, 17))
    return _CLASSES["bytea"](b"".join(chain(
        (_HEAD.pack(1, 0, 17, n, 1),), chain.from_iterable(zip(map(_LEN.pack, map(len, vals)), vals)))))


#: element type -> the encoder of a one-dimensional array of it
ENCODERS: dict[str, Callable[[Iterable[Any]], Encoded]] = {
    **{name: _fixed_encoder(name) for name in _TYPES if name != "bytea"}, "bytea": _encode_bytea,
}


def encoder_for(element_type: str) -> Callable[[Iterable[Any]], Encoded] | None:
    """The encoder of arrays of ``element_type`` (as written in SQL: ``int8``, ``bytea``…), or None."""
    return ENCODERS.get(element_type)


def encode(element_type: str, values: Iterable[Any]) -> Encoded:
    """``values`` as a pre-encoded ``element_type[]`` parameter (for a ``%b`` placeholder).
    Raises KeyError for an element type ``ENCODERS`` does not know, struct.error for a value
    out of the type's range."""
    return ENCODERS[element_type](values)
