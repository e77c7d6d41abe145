"""Frames, request headers and response encoding: bytes in, messages out, and back. Sans-IO.

A Kafka frame is a signed 32-bit big-endian size followed by that many bytes. A request frame
starts with a request header (api key, api version, correlation id, client id; plus tagged fields
in header v2), followed by the request body whose layout depends on (api key, version). A
response frame is a response header (correlation id; plus tagged fields in header v1) and the
body.

Nothing here does I/O: the asyncio shell reads frames off the socket and hands them to
``decode_request``; handlers return kio response objects that ``encode_response`` turns into a
list of parts. A part is ``bytes`` or an opaque file-slice object taken from a
``FileRecords`` placeholder, so that record data can be sent from the page cache without being
copied into Python (the shell decides how to send slices). Record data a storage engine holds
in memory (``bytes`` inside a ``FileRecords``) is copied into the bytes parts.

Errors: ``FrameError`` means the peer broke the protocol; the connection must be closed (Kafka
closes connections on malformed requests, too). Nothing in this module raises anything else on
any input (a hypothesis fuzz test holds it to that).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Iterable

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from oncelog.protocol import apis
from oncelog.protocol.errors import UnsupportedVersion
from oncelog.protocol.produce_request import read_produce_request
from oncelog.protocol.schema_reader import MAX_REQUEST_ENTRIES, TooManyEntries, check_message, read_message

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes

_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id


class FrameError(Exception):
    """The peer sent something that is not a valid request: close the connection."""


def frame_size(prefix: bytes, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES, limit: str = "socket.request.max.bytes") -> int:
    """The size announced by a 4-byte frame prefix; raises FrameError if negative or too big
    (``limit``: the property that set ``max_bytes``, named in the error)."""
    (size,) = _SIZE.unpack(prefix)
    if size < _HEADER_PREFIX.size:
        raise FrameError(f"frame size {size} is smaller than a request header")
    if size > max_bytes:
        raise FrameError(f"frame size {size} exceeds {limit}={max_bytes}")
    return size


@dataclass(frozen=True, slots=True)
class RequestHead:
    """The first eight bytes of every request: enough to route it and to answer it."""

    api_key: int
    api_version: int
    correlation_id: int


def peek_head(frame: bytes) -> RequestHead:
    if len(frame) < _HEADER_PREFIX.size:
        raise FrameError(f"request of {len(frame)} bytes is shorter than its header")
    return RequestHead(*_HEADER_PREFIX.unpack_from(frame))


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    #: array entries the request announced (header and body; Produce: topics and partitions)
    entries: int = 0


def decode_request(frame: bytes) -> Request:
    """Decode one request frame (without its size prefix).

    Raises ``UnsupportedVersion`` for an (api key, version) we have no schema for, and
    ``FrameError`` for anything malformed: a length that does not fit in what remains, a null
    where the schema allows none, a truncated field. Every length is checked before anything is
    allocated (``schema_reader``; Produce has its own reader, ``produce_request``). Unknown
    tagged fields are skipped, as the protocol requires. A request announcing more than
    ``schema_reader.MAX_REQUEST_ENTRIES`` array entries in all is a ``FrameError`` too, found at
    the array length that passes the bound (issue 26 row 9).
    """
    if not isinstance(frame, bytes):
        frame = bytes(frame)
    head = peek_head(frame)
    body_cls = apis.message_class(head.api_key, head.api_version, response=False)
    header_cls = RequestHeaderV2 if body_cls.__flexible__ else RequestHeaderV1
    budget = [MAX_REQUEST_ENTRIES]  # array entries the request may still announce
    try:
        used = check_message(header_cls, frame, 0, budget)
        try:
            header, used = entity_reader(header_cls)(frame, 0)
        except KeyError:  # an unknown tagged field (kio's native reader refuses them)
            header, used = read_message(header_cls, frame, 0)
        if head.api_key == apis.PRODUCE:
            body, _ = read_produce_request(frame, used, head.api_version, budget)
        else:
            check_message(body_cls, frame, used, budget)  # every length fits: now kio may allocate
            try:
                body, _ = entity_reader(body_cls)(frame, used)
            except KeyError:
                body, _ = read_message(body_cls, frame, used)
    except TooManyEntries as exc:
        raise FrameError(f"refused {apis.api_name(head.api_key)} v{head.api_version} request "
                         f"(correlation id {head.correlation_id}): {exc}") from None
    except Exception as exc:  # ValueError, kio's BufferUnderflow, UnicodeDecodeError, ...
        raise FrameError(
            f"malformed {apis.api_name(head.api_key)} v{head.api_version} request "
            f"(correlation id {head.correlation_id}): {type(exc).__name__}: {exc}"
        ) from None
    # Bytes after the body are ignored, as Kafka's broker ignores them: librdkafka 2.x sends
    # three extra bytes after its all-topics Metadata v12 request, and Kafka serves it.
    return Request(head.api_key, head.api_version, head.correlation_id, header.client_id, body,
                   MAX_REQUEST_ENTRIES - budget[0])


class FileRecords(bytes):
    """Placeholder for a records field whose bytes live in log files or in memory.

    kio's writers call ``len(value)`` and then ``buffer.write(value)``; the ``_PartsSink`` below
    recognises this placeholder and emits its parts instead of its (empty) bytes. A part is
    either ``bytes`` (whole batches a storage engine read into memory: copied into the response
    like any other bytes) or an opaque file-slice object with a ``length`` attribute (the local
    storage engine's ``FileSlice``: passed through, for the shell to send from the file).
    """

    # (bytes subclasses cannot have __slots__; instances carry a __dict__.)

    def __new__(cls, slices: Iterable[Any]) -> "FileRecords":
        self = super().__new__(cls, b"")
        self.slices = tuple(slices)
        self.length = sum(len(s) if isinstance(s, (bytes, bytearray)) else s.length for s in self.slices)
        return self

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return self.length > 0


class _PartsSink:
    """A kio ``Writable`` that gathers small writes (and in-memory record chunks) into one
    buffer and keeps file slices apart."""

    __slots__ = ("parts", "buf", "size")

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.buf = bytearray()
        self.size = 0

    def write(self, data: bytes) -> None:
        if type(data) is FileRecords:
            for part in data.slices:
                if isinstance(part, (bytes, bytearray)):
                    self.buf += part
                    continue
                if self.buf:
                    self.parts.append(bytes(self.buf))
                    self.buf.clear()
                self.parts.append(part)
            self.size += data.length
        else:
            self.buf += data
            self.size += len(data)

    def finish(self) -> list[Any]:
        if self.buf:
            self.parts.append(bytes(self.buf))
            self.buf.clear()
        return self.parts


class EncodedBody(bytes):
    """A response body a handler encoded itself (``produce_response``: the hot path), in
    exactly the bytes kio would write for it; ``encode_response`` only adds size and header."""


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> list[Any]:
    """Encode a response as parts (bytes and file slices), size prefix included."""
    if type(body) is EncodedBody:
        header = _SIZE.pack(correlation_id)
        if apis.response_header_version(api_key, api_version) == 1:
            header += b"\x00"  # no tagged fields
        return [_SIZE.pack(len(header) + len(body)) + header + body]
    sink = _PartsSink()
    sink.write(b"\x00\x00\x00\x00")  # size, patched below
    if apis.response_header_version(api_key, api_version) == 1:
        entity_writer(ResponseHeaderV1)(sink, ResponseHeaderV1(correlation_id=correlation_id))
    else:
        entity_writer(ResponseHeaderV0)(sink, ResponseHeaderV0(correlation_id=correlation_id))
    entity_writer(type(body))(sink, body)
    size = sink.size - 4
    parts = sink.finish()
    first = parts[0]
    parts[0] = _SIZE.pack(size) + first[4:]
    return parts


def encode_response_bytes(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """``encode_response`` for bodies without file slices (tests, small responses)."""
    parts = encode_response(api_key, api_version, correlation_id, body)
    if not all(isinstance(p, (bytes, bytearray)) for p in parts):
        raise TypeError("response holds file slices; use encode_response")
    return b"".join(parts)


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """Encode a request frame, size prefix included (test clients and tools)."""
    sink = _PartsSink()
    if apis.request_header_version(api_key, api_version) == 2:
        header: Any = RequestHeaderV2(
            request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=client_id
        )
    else:
        header = RequestHeaderV1(
            request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=client_id
        )
    entity_writer(type(header))(sink, header)
    entity_writer(type(body))(sink, body)
    payload = b"".join(sink.finish())
    return _SIZE.pack(len(payload)) + payload


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """Decode a response frame (without size prefix): (correlation id, body). For test clients."""
    frame = bytes(frame)
    header_cls = ResponseHeaderV1 if apis.response_header_version(api_key, api_version) == 1 else ResponseHeaderV0
    header, used = entity_reader(header_cls)(frame, 0)
    body, _ = entity_reader(apis.message_class(api_key, api_version, response=True))(frame, used)
    return header.correlation_id, body
