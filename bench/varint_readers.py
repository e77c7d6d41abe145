"""The cost of the protocol's varint readers where they are hot (issue 27: one shared reader).

Three callers read varints: the Produce request reader (``produce_request.read_produce_request``:
compact lengths, counts and tagged sections of a flexible request), the request checker
(``schema_reader.check_message``: every compact length past its inlined one-byte fast path, and
every tagged section) and the record decoder (``records.iter_records``: zigzag varints, several
per record). This script times each on a fixed input, best of ``--repeat`` rounds of
``--number`` calls, in microseconds per call; run it once per checkout to compare, e.g.::

    PYTHONPATH=/tmp/base/src python bench/varint_readers.py   # before
    PYTHONPATH=src python bench/varint_readers.py             # after

Inputs: a Produce v9 request of 200 partitions whose batches are 300 bytes (two-byte lengths);
a Metadata v12 request naming 200 topics of 200 characters (two-byte lengths: the checker's
inlined fast path falls through to the reader); a batch of 1,000 records with keys and a header, its
deltas past 127 (multi-byte varints); and each reader alone on a one-byte and a three-byte
varint, called by the name its caller uses (``produce_request._uvarint``, ``schema_reader._uv``,
``records._varint``: the same names before and after issue 27).
"""

from __future__ import annotations

import argparse
import datetime
import timeit
import uuid

from oncelog.protocol import apis, framing, records
from oncelog.protocol.produce_request import read_produce_request
from oncelog.protocol.schema_reader import check_message

PARTITIONS = 200


def _body(api_key: int, version: int, body: object) -> tuple[bytes, int]:
    """(request frame without its size prefix, offset of the body)"""
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_reader

    frame = framing.encode_request(api_key, version, 1, "bench", body)[4:]
    _, used = entity_reader(RequestHeader)(frame, 0)  # both requests here are flexible
    return frame, used


def produce_input() -> tuple[bytes, int]:
    m = apis.message_module_classes(apis.PRODUCE, 9, False)
    batch = records.build_batch([(None, b"x" * 200, [])], timestamp_ms=1_700_000_000_000)
    body = m["ProduceRequest"](
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
        topic_data=(m["TopicProduceData"](name="topic", partition_data=tuple(
            m["PartitionProduceData"](index=p, records=batch) for p in range(PARTITIONS))),),
    )
    return _body(apis.PRODUCE, 9, body)


def metadata_input() -> tuple[type, bytes, int]:
    m = apis.message_module_classes(apis.METADATA, 12, False)
    body = m["MetadataRequest"](
        topics=tuple(m["MetadataRequestTopic"](topic_id=uuid.UUID(int=0), name=f"{p:04d}-" + "t" * 195)
                     for p in range(PARTITIONS)),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    )
    frame, offset = _body(apis.METADATA, 12, body)
    return m["MetadataRequest"], frame, offset


def records_input() -> bytes:
    rows = [(f"key-{i}".encode(), b"v" * 150, [("h", b"1")]) for i in range(1000)]
    return records.build_batch(rows, timestamp_ms=1_700_000_000_000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--number", type=int, default=200, help="calls per round (the single-varint cases: x1000)")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    produce, p_off = produce_input()
    cls, metadata, m_off = metadata_input()
    batch = records_input()
    assert len(read_produce_request(produce, p_off, 9)[0].topic_data[0].partition_data) == PARTITIONS
    assert check_message(cls, metadata, m_off) == len(metadata)
    assert sum(1 for _ in records.iter_records(batch)) == 1000
    # name -> (call, calls per round as a multiple of --number)
    cases = {
        "read_produce_request v9, 200 partitions": (lambda: read_produce_request(produce, p_off, 9), 1),
        "check_message Metadata v12, 200 long names": (lambda: check_message(cls, metadata, m_off), 1),
        "iter_records, 1000 records": (lambda: sum(1 for _ in records.iter_records(batch, verify_crc=False)), 1),
    }
    # the readers alone, by the names each caller binds them to (the same before and after)
    from oncelog.protocol import produce_request, schema_reader

    for label, data in (("1 byte", bytes([0x05])), ("3 bytes", bytes([0xC1, 0xB3, 0x07]))):
        mv = memoryview(data)
        cases[f"produce_request._uvarint, {label}"] = (lambda d=data: produce_request._uvarint(d, 0), 1000)
        cases[f"schema_reader._uv, {label}"] = (lambda d=data: schema_reader._uv(d, 0), 1000)
        cases[f"records._varint, {label}"] = (lambda d=mv: records._varint(d, 0), 1000)
    for name, (fn, times) in cases.items():
        number = args.number * times
        best = min(timeit.repeat(fn, number=number, repeat=args.repeat)) / number
        print(f"{name:45s} {best * 1e6:9.3f} µs")

if __name__ == "__main__":
    main()
