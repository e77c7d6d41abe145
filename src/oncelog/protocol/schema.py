"""The shape of a kio message class, read from its dataclass fields. Sans-IO.

kio generates one frozen dataclass per message and version; each field carries its Kafka type
in ``metadata["kafka_type"]`` (and ``metadata["tag"]`` for a tagged field), and its Python type
says whether it is nullable, an array, or a nested message. ``field_kinds(cls)`` turns that into
``FieldKind`` values, using only the dataclass and typing APIs (none of kio's private modules),
for the request reader (schema_reader.py) and the response builder (messages.py).
"""

from __future__ import annotations

import datetime
import types
import typing
import uuid
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import cache
from typing import Any

from kio.serial import readers as kr

__all__ = ["FieldKind", "field_kinds", "implicit_default", "scalar_reader"]


@dataclass(frozen=True, slots=True)
class FieldKind:
    name: str
    kafka_type: str  # "int32", "string", "records", ...; "" for a nested message
    entity: type | None  # the nested message class (of the field, or of the array's items)
    array: bool
    nullable: bool  # the field (the array itself, for an array) may be null
    items_nullable: bool  # an array's items may be null
    tag: int | None  # the tag of a tagged field
    default: Any  # the declared default, or MISSING


def _strip_none(t: Any) -> tuple[Any, bool]:
    if typing.get_origin(t) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return (args[0] if len(args) == 1 else t), len(args) < len(typing.get_args(t))
    return t, False


@cache
def field_kinds(cls: type) -> tuple[FieldKind, ...]:
    out = []
    for f in fields(cls):
        t, nullable = _strip_none(f.type)
        array = typing.get_origin(t) is tuple
        items_nullable = False
        if array:
            t, items_nullable = _strip_none(typing.get_args(t)[0])
        entity = t if is_dataclass(t) else None
        tag = f.metadata.get("tag")
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)  # type: ignore[misc]
        out.append(FieldKind(f.name, str(f.metadata.get("kafka_type", "")), entity, array, nullable, items_nullable,
                             None if tag is None else int(tag), default))
    return tuple(out)


_ZERO: dict[str, Any] = {
    "bool": False, "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint8": 0, "uint16": 0, "uint32": 0, "uint64": 0,
    "float64": 0.0, "string": "", "bytes": b"", "records": b"", "uuid": uuid.UUID(int=0),
    "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0), "error_code": 0,
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.timezone.utc),
}


def implicit_default(kind: FieldKind) -> Any:
    """The value a tagged field has when a message does not carry it (Kafka's implicit default:
    zero, empty, null)."""
    if kind.default is not MISSING:
        return kind.default
    if kind.array:
        return ()
    if kind.nullable or kind.entity is not None:
        return None
    return _ZERO.get(kind.kafka_type, 0)


def scalar_reader(kind: FieldKind, flexible: bool, *, header: bool = False) -> Any:
    """kio's public reader for a scalar field. The request header's client id is a legacy
    nullable string even in the flexible header v2."""
    t = kind.kafka_type
    if t == "string":
        if header or not flexible:
            return kr.read_nullable_legacy_string if (kind.nullable or header) else kr.read_legacy_string
        return kr.read_compact_string_nullable if kind.nullable else kr.read_compact_string
    if t in ("bytes", "records"):
        if flexible:
            return kr.read_compact_string_as_bytes_nullable if kind.nullable else kr.read_compact_string_as_bytes
        return kr.read_nullable_legacy_bytes if kind.nullable else kr.read_legacy_bytes
    if t == "datetime_i64":
        return kr.read_nullable_datetime_i64 if kind.nullable else kr.read_datetime_i64
    reader = _FIXED_READERS.get(t)
    if reader is None:
        raise TypeError(f"{kind.name}: no reader for kafka type {t!r}")  # a new schema: extend the table
    return reader


_FIXED_READERS: dict[str, Any] = {
    "bool": kr.read_boolean, "int8": kr.read_int8, "int16": kr.read_int16, "int32": kr.read_int32,
    "int64": kr.read_int64, "uint8": kr.read_uint8, "uint16": kr.read_uint16, "uint32": kr.read_uint32,
    "uint64": kr.read_uint64, "float64": kr.read_float64, "uuid": kr.read_uuid,
    "timedelta_i32": kr.read_timedelta_i32, "timedelta_i64": kr.read_timedelta_i64, "error_code": kr.read_error_code,
}
