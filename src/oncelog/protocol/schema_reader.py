"""Request bodies read safely: every length is checked against the bytes that remain *before*
anything is allocated. Sans-IO.

Why. kio 0.6.5 reads a whole message in Rust, and its array readers reserve room for the
announced element count before reading a single element: a compact-array length varint of
``ff ff ff ff 32`` in a 26-byte Metadata v12 request makes it ask for ~100 GB, the allocation
fails and the process aborts (SIGABRT, no Python exception). Its scalar readers (strings, bytes,
varints, uuids) check the buffer first. (Reported upstream; docs/RELIABILITY.md, "Bad input".)

How. ``check_message(cls, buf, offset)`` walks the schema without building anything and refuses:

* an array whose announced count cannot fit in the bytes that remain, counting the smallest
  size one element can have (``_min_size``);
* a null (length -1) array, string, bytes or nested entity where the schema does not declare
  the field nullable (handlers never see a None they did not ask for);
* a string, bytes or tagged field whose announced size runs past the end.

After it passes, kio's native reader cannot be asked for more than a few bytes per byte of
frame, and builds the message fast. Its one other failure, ``KeyError`` on a tagged field it does
not know (the protocol says such fields are skipped), is served by ``read_message``: the same
walk that also builds the entities, skipping unknown tags. The checker costs about as much as
the native decode (6 vs 7 µs for a 10-partition Fetch); the full Python reader ten times more.

Bounded work (issue 26 row 9). Every array entry a request announces costs the broker Python
objects and time in the handler and in the answer, whatever its size on the wire: a 20 MB
Metadata v1 request naming 10 million empty topic names took 87 s and 1.5 GB to answer. Kafka
has no bound but ``socket.request.max.bytes``; its Java decoder is fast enough that the frame
size bounds the work. Here a request may announce at most ``MAX_REQUEST_ENTRIES`` array entries
in all (every array, nested ones included; Produce's reader counts its topics and partitions
the same way), checked at each array's length before its entries are walked, so a refusal costs
nothing more. Past it the request raises ``TooManyEntries`` and the connection is closed with
one (rate-limited) log line: there is no error code a client could act on (Metadata has no
top-level one, and answering each of millions of entries is the work being refused), and a
request that size comes from a broken or hostile client. The bound is far above what real
clients send: a consumer fetching from every partition a broker can host (about 6,700 with the
default descriptor limit), an admin asking for every topic.

Errors: ``ValueError`` or kio's ``SerialError`` (``BufferUnderflow``, ``DecodeError``) for anything
malformed; the caller closes the connection. Produce, the hot path, has its own reader (``produce_request.py``).
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any, Callable

from kio.serial import readers as kr

from oncelog.protocol.schema import FieldKind, field_kinds, implicit_default, scalar_reader
from oncelog.protocol.varint import read_uvarint as _uv

__all__ = ["MAX_REQUEST_ENTRIES", "TooManyEntries", "check_message", "read_message", "spend"]

#: The most array entries one request may announce, all arrays together (see the module docstring).
MAX_REQUEST_ENTRIES = 100_000


class TooManyEntries(ValueError):
    """A request announcing more than ``MAX_REQUEST_ENTRIES`` array entries."""

    def __init__(self, announced: int) -> None:
        super().__init__(f"the request announces at least {announced:,} array entries, more than the "
                         f"{MAX_REQUEST_ENTRIES:,} the broker serves in one request")
        self.announced = announced

Reader = Callable[[bytes, int], tuple[Any, int]]

#: Smallest encoded size of one scalar of each Kafka type: (non-flexible, flexible).
_SCALAR_MIN: dict[str, tuple[int, int]] = {
    "bool": (1, 1),
    "int8": (1, 1),
    "int16": (2, 2),
    "uint16": (2, 2),
    "int32": (4, 4),
    "uint32": (4, 4),
    "int64": (8, 8),
    "float64": (8, 8),
    "uuid": (16, 16),
    "timedelta_i32": (4, 4),
    "timedelta_i64": (8, 8),
    "datetime_i64": (8, 8),
    "string": (2, 1),
    "bytes": (4, 1),
    "records": (4, 1),
    "error_code": (2, 2),
}

#: Item readers for arrays of scalars: kafka type -> (non-flexible reader, flexible reader).
_ITEM_READERS: dict[str, tuple[Reader, Reader]] = {
    "int8": (kr.read_int8, kr.read_int8),
    "int16": (kr.read_int16, kr.read_int16),
    "int32": (kr.read_int32, kr.read_int32),
    "int64": (kr.read_int64, kr.read_int64),
    "uuid": (kr.read_uuid, kr.read_uuid),
    "string": (kr.read_legacy_string, kr.read_compact_string),
}
_NULLABLE_ITEM_READERS: dict[str, tuple[Reader, Reader]] = {
    "string": (kr.read_nullable_legacy_string, kr.read_compact_string_nullable),
}


def check_message(cls: type, buf: bytes, offset: int = 0, budget: list[int] | None = None) -> int:
    """Walk one ``cls`` entity at ``buf[offset]`` without building it; returns where it ends.
    Raises ValueError if any length does not fit or a null is where none is allowed, and
    TooManyEntries past ``MAX_REQUEST_ENTRIES`` array entries. ``budget`` (a one-item list, the
    entries still allowed; default a fresh ``[MAX_REQUEST_ENTRIES]``) is spent as arrays are met:
    pass the same list to check a header and its body against one bound."""
    return _checker(cls)(buf, offset, [MAX_REQUEST_ENTRIES] if budget is None else budget)


def spend(budget: list[int], n: int) -> None:
    """Take ``n`` array entries from ``budget`` (``check_message``'s one-item list); raises
    TooManyEntries once it is overspent. The checkers' generated code inlines the same test;
    Produce's own reader (produce_request.py) calls this."""
    budget[0] -= n
    if budget[0] < 0:
        _too_many(budget)


def _too_many(budget: list[int]) -> None:
    raise TooManyEntries(MAX_REQUEST_ENTRIES - budget[0])


def read_message(cls: type, buf: bytes, offset: int = 0) -> tuple[Any, int]:
    """Read one ``cls`` entity (a request body or header) at ``buf[offset]``, skipping unknown
    tagged fields; the same refusals as ``check_message``."""
    return _entity_reader(cls)(buf, offset)


@cache
def _min_size(cls: type) -> int:
    """The fewest bytes one ``cls`` entity can be encoded in (at least 1)."""
    flexible = bool(cls.__flexible__)
    total = 1 if flexible else 0  # the tagged-field count
    for k in field_kinds(cls):
        if k.tag is not None:
            continue
        if k.array:
            total += 1 if flexible else 4
        elif k.entity is not None:
            total += 1 if k.nullable else _min_size(k.entity)
        else:
            total += _SCALAR_MIN.get(k.kafka_type, (1, 1))[flexible]
    return max(total, 1)


@cache
def _entity_reader(cls: type) -> Reader:
    flexible = bool(cls.__flexible__)
    is_header = cls.__name__ == "RequestHeader"
    plain: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    defaults: dict[str, Any] = {}
    for k in field_kinds(cls):
        reader = _field_reader(cls, k, is_header)
        if k.tag is None:
            plain.append((k.name, reader))
        else:
            tagged[k.tag] = (k.name, reader)
            defaults[k.name] = implicit_default(k)

    def read(buf: bytes, offset: int) -> tuple[Any, int]:
        pos = offset
        values: dict[str, Any] = {}
        for name, reader in plain:
            values[name], used = reader(buf, pos)
            pos += used
        if flexible:
            values.update(defaults)
            count, used = kr.read_unsigned_varint(buf, pos)
            pos += used
            if count > len(buf) - pos:
                raise ValueError(f"{count} tagged fields cannot fit in {len(buf) - pos} bytes")
            for _ in range(count):
                tag, used = kr.read_unsigned_varint(buf, pos)
                pos += used
                size, used = kr.read_unsigned_varint(buf, pos)
                pos += used
                if size > len(buf) - pos:
                    raise ValueError(f"tagged field {tag} of {size} bytes runs past the end")
                known = tagged.get(tag)
                if known is not None:
                    name, reader = known
                    values[name], _ = reader(buf[: pos + size], pos)
                pos += size
        return cls(**values), pos - offset

    return read


def _field_reader(cls: type, k: FieldKind, is_header: bool) -> Reader:
    flexible = bool(cls.__flexible__)
    where = f"{cls.__qualname__}.{k.name}"
    if k.entity is not None:
        inner = _entity_reader(k.entity)
        if k.array:
            return _array(inner, _min_size(k.entity), flexible, k.nullable, where)
        return _nullable_entity(inner) if k.nullable and k.tag is None else inner
    if k.array:
        table = _NULLABLE_ITEM_READERS if k.items_nullable else _ITEM_READERS
        if k.kafka_type not in table:
            raise TypeError(f"{where}: no bounded reader for arrays of {k.kafka_type}")  # a new schema: extend the table
        return _array(table[k.kafka_type][flexible], _SCALAR_MIN[k.kafka_type][flexible], flexible, k.nullable, where)
    return scalar_reader(k, flexible, header=is_header)


def _nullable_entity(inner: Reader) -> Reader:
    def read(buf: bytes, offset: int) -> tuple[Any, int]:
        marker, used = kr.read_int8(buf, offset)
        if marker < 0:
            return None, used
        value, more = inner(buf, offset + used)
        return value, used + more

    return read


def _array(item: Reader, item_min: int, flexible: bool, nullable: bool, where: str) -> Reader:
    length_reader = kr.read_compact_array_length if flexible else kr.read_legacy_array_length

    def read(buf: bytes, offset: int) -> tuple[Any, int]:
        length, used = length_reader(buf, offset)
        if length is None or length < 0:
            if not nullable:
                raise ValueError(f"{where}: null array where the schema requires one")
            return None, used
        pos = offset + used
        if length * item_min > len(buf) - pos:
            raise ValueError(f"{where}: array of {length} items cannot fit in {len(buf) - pos} bytes")
        items = []
        append = items.append
        for _ in range(length):
            value, n = item(buf, pos)
            append(value)
            pos += n
        return tuple(items), pos - offset

    return read


# --------------------------------------------------------------------------------------------
# The checker: for each entity class, one generated function (as ``dataclasses`` generates
# ``__init__``) that skips fixed-size fields in one step and inlines the one-byte fast path of
# every varint (nearly every length is one byte, and the test in line saves a Python call per
# field; past it, the shared ``varint.read_uvarint``); nested entities and array items call
# their own class's function.

Check = Callable[[bytes, int, list[int]], int]  # (buffer, position, budget of array entries) -> end

_FIXED = {k: v[0] for k, v in _SCALAR_MIN.items() if k not in ("string", "bytes", "records")}
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


def _tags(buf: bytes, pos: int) -> int:
    """Skip a tagged-field section (any tags, each by its announced size)."""
    count, pos = _uv(buf, pos)
    for _ in range(count):
        _tag, pos = _uv(buf, pos)
        size, pos = _uv(buf, pos)
        if size > len(buf) - pos:
            raise ValueError(f"tagged field of {size} bytes, {len(buf) - pos} left")
        pos += size
    return pos


def _fail(where: str, what: str) -> None:
    raise ValueError(f"{where}: {what}")


#: Source templates. ``pos`` is the position, ``n`` the buffer length, ``b`` the budget of array
#: entries (a one-item list shared by the whole request); ``{w}`` names the field.
_T_FIXED = """
    pos += {size}
    if pos > n: _fail({w!r}, "buffer ends inside it")"""
_T_COMPACT_LEN = """
    if pos < n and buf[pos] < 0x80:
        v = buf[pos]; pos += 1
    else:
        v, pos = _uv(buf, pos)"""
_T_COMPACT_SIZED = _T_COMPACT_LEN + """
    if v == 0:
        {on_null}
    else:
        pos += v - 1
        if pos > n: _fail({w!r}, "announced size runs past the end")"""
_T_LEGACY_SIZED = """
    if pos + {width} > n: _fail({w!r}, "buffer ends inside a length")
    (v,) = {unpack}(buf, pos); pos += {width}
    if v < 0:
        if v != -1: _fail({w!r}, "negative length %d" % v)
        {on_null}
    else:
        pos += v
        if pos > n: _fail({w!r}, "announced size runs past the end")"""
_T_COMPACT_ARRAY = _T_COMPACT_LEN + """
    v -= 1"""
_T_LEGACY_ARRAY = """
    if pos + 4 > n: _fail({w!r}, "buffer ends inside an array length")
    (v,) = _I32(buf, pos); pos += 4"""
_T_ARRAY_BODY = """
    if v < 0:
        if v != -1: _fail({w!r}, "negative array length %d" % v)
        {on_null}
    elif v * {item_min} > n - pos:
        _fail({w!r}, "array of %d items cannot fit in %d bytes" % (v, n - pos))
    else:
        b[0] -= v
        if b[0] < 0: _too_many(b)
        for _ in range(v):
            {item}"""
_T_NULLABLE_ENTITY = """
    if pos >= n: _fail({w!r}, "buffer ends inside a null marker")
    if buf[pos] >= 0x80:
        pos += 1
    else:
        pos = {check}(buf, pos + 1, b)"""
_T_TAGS = """
    if pos < n and buf[pos] == 0:
        pos += 1
    else:
        pos = _tags(buf, pos)"""


@cache
def _checker(cls: type) -> Check:
    flexible = bool(cls.__flexible__)
    is_header = cls.__name__ == "RequestHeader"
    env: dict[str, Any] = {"_uv": _uv, "_tags": _tags, "_fail": _fail, "_I16": _I16, "_I32": _I32,
                           "_too_many": _too_many}
    lines: list[str] = []
    fixed = 0  # bytes of consecutive fixed-size fields not yet emitted

    def flush() -> None:
        nonlocal fixed
        if fixed:
            lines.append(_T_FIXED.format(size=fixed, w=cls.__qualname__))
            fixed = 0

    def null(nullable: bool, where: str, what: str = "null where the schema requires a value") -> str:
        return "pass" if nullable else f"_fail({where!r}, {what!r})"

    def sized(flex: bool, width: int, nullable: bool, where: str) -> str:
        if flex:
            return _T_COMPACT_SIZED.format(w=where, on_null=null(nullable, where))
        unpack = "_I16" if width == 2 else "_I32"
        return _T_LEGACY_SIZED.format(w=where, width=width, unpack=unpack, on_null=null(nullable, where))

    for i, k in enumerate(field_kinds(cls)):
        if k.tag is not None:
            continue  # tagged fields are checked by their size in the tag section
        where = f"{cls.__qualname__}.{k.name}"
        if k.array:
            flush()
            head = _T_COMPACT_ARRAY if flexible else _T_LEGACY_ARRAY
            if k.entity is not None:
                env[f"_c{i}"] = _checker(k.entity)
                item, item_min = f"pos = _c{i}(buf, pos, b)", _min_size(k.entity)
            elif k.kafka_type in _FIXED:
                item = f"pos += {_FIXED[k.kafka_type]}"
                item_min = _FIXED[k.kafka_type]  # the count check already bounds the whole array
            else:
                body = sized(flexible, 2 if k.kafka_type == "string" else 4, k.items_nullable, where)
                env[f"_c{i}"] = _compile(f"{where}[]", body, env)
                item, item_min = f"pos = _c{i}(buf, pos, b)", _SCALAR_MIN[k.kafka_type][flexible]
            lines.append(head.format(w=where))
            on_null = null(k.nullable, where, "null array where the schema requires one")
            lines.append(_T_ARRAY_BODY.format(w=where, on_null=on_null, item_min=item_min, item=item))
        elif k.entity is not None:
            flush()
            env[f"_c{i}"] = _checker(k.entity)
            if k.nullable:
                lines.append(_T_NULLABLE_ENTITY.format(w=where, check=f"_c{i}"))
            else:
                lines.append(f"\n    pos = _c{i}(buf, pos, b)")
        elif k.kafka_type in _FIXED:
            fixed += _FIXED[k.kafka_type]
        elif k.kafka_type == "string":
            flush()
            # The request header's client id is a legacy nullable string even in header v2.
            lines.append(sized(flexible and not is_header, 2, k.nullable or is_header, where))
        elif k.kafka_type in ("bytes", "records"):
            flush()
            lines.append(sized(flexible, 4, k.nullable, where))
        else:
            raise TypeError(f"{where}: no checker for kafka type {k.kafka_type!r}")  # a new schema: extend
    flush()
    if flexible:
        lines.append(_T_TAGS)
    return _compile(cls.__qualname__, "".join(lines), env)


def _compile(name: str, body: str, env: dict[str, Any]) -> Check:
    src = f"def check(buf, pos, b):\n    n = len(buf){body}\n    return pos\n"
    namespace: dict[str, Any] = {}
    exec(compile(src, f"<check {name}>", "exec"), dict(env), namespace)
    return namespace["check"]
