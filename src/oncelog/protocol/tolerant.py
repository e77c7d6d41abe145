"""A schema-walking reader that ignores unknown tagged fields, as the Kafka protocol requires.

kio's native reader raises ``KeyError`` when a flexible message carries a tagged field its
schema does not know, but the protocol says receivers must skip such fields (that is how newer
clients add optional data without a version bump). ``decode_request`` tries the fast native
reader first and, only on that ``KeyError``, re-reads the frame here: the same field readers,
walked in Python, skipping unknown tags by their length.

``read_tolerant(cls, buf, offset) -> (entity, bytes_used)`` has the native reader's contract.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, fields
from functools import cache
from typing import Any, Callable

from kio._kio_native import get_field_reader
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag, is_optional
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_unsigned_varint,
)

Reader = Callable[[bytes, int], tuple[Any, int]]


def read_tolerant(cls: type, buf: bytes, offset: int) -> tuple[Any, int]:
    return _entity_reader(cls)(buf, offset)


@cache
def _entity_reader(cls: type) -> Reader:
    flexible = bool(cls.__flexible__)
    is_header = cls.__name__ == "RequestHeader"
    plain: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    defaults: dict[str, Any] = {}
    for f in fields(cls):
        tag = get_field_tag(f)
        reader = _field_reader(cls, f, is_header, tag is not None)
        if tag is None:
            plain.append((f.name, reader))
        else:
            tagged[int(tag)] = (f.name, reader)
            defaults[f.name] = f.default if f.default is not MISSING else get_tagged_field_default(f)

    def read(buf: bytes, offset: int) -> tuple[Any, int]:
        pos = offset
        values: dict[str, Any] = {}
        for name, reader in plain:
            values[name], used = reader(buf, pos)
            pos += used
        if flexible:
            values.update(defaults)
            count, used = read_unsigned_varint(buf, pos)
            pos += used
            for _ in range(count):
                tag, used = read_unsigned_varint(buf, pos)
                pos += used
                size, used = read_unsigned_varint(buf, pos)
                pos += used
                if pos + size > len(buf):
                    raise ValueError(f"tagged field {tag} of {size} bytes runs past the end")
                known = tagged.get(tag)
                if known is not None:
                    name, reader = known
                    values[name], _ = reader(buf, pos)
                pos += size
        return cls(**values), pos - offset

    return read


def _field_reader(cls: type, f: Field[Any], is_header: bool, is_tag: bool) -> Reader:
    kind = classify_field(f)
    flexible = bool(cls.__flexible__)
    if isinstance(kind, EntityField):
        inner = _entity_reader(kind.type_)
        if is_optional(f) and not is_tag:
            return _nullable(inner)
        return inner
    if isinstance(kind, EntityTupleField):
        return _array(_entity_reader(kind.type_), flexible)
    return get_field_reader(cls, f, is_header, is_tag)


def _nullable(inner: Reader) -> Reader:
    def read(buf: bytes, offset: int) -> tuple[Any, int]:
        marker, used = read_int8(buf, offset)
        if marker < 0:
            return None, used
        value, more = inner(buf, offset + used)
        return value, used + more

    return read


def _array(item: Reader, flexible: bool) -> Reader:
    def read(buf: bytes, offset: int) -> tuple[Any, int]:
        if flexible:
            length, used = read_compact_array_length(buf, offset)
        else:
            length, used = read_legacy_array_length(buf, offset)
        if length is None or length < 0:
            return None, used
        if length > len(buf):
            raise ValueError(f"array of {length} items cannot fit in {len(buf)} bytes")
        pos = offset + used
        items = []
        for _ in range(length):
            value, n = item(buf, pos)
            items.append(value)
            pos += n
        return tuple(items), pos - offset

    return read
