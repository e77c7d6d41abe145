"""The console's message browser and transaction timeline, pure (console/browse.py, messages.py,
timeline.py), over a hand-made partition: real record batches (records.build_batch) and the
leader's transaction facts, as broker/observability/partition_read.py hands them over (R15:
what a read_committed consumer sees)."""

from __future__ import annotations

import base64
import json

import pytest

from oncelog.broker.observability.partition_read import TxnFacts, Window
from oncelog.console import messages
from oncelog.console.browse import shown
from oncelog.console.messages import QueryError, page, parse_query
from oncelog.console.timeline import timeline
from oncelog.protocol import records
from oncelog.storage.txn_index import AbortedTxn

TS = 1_700_000_000_000
PLAIN, TXN_C, TXN_A, TXN_O = -1, 7, 8, 9  # producer ids


class FakePartition:
    """A partition's log as whole batches, with its leader's facts; reads as Partition.read does."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.end = 0
        self.aborted: list[AbortedTxn] = []
        self.open: dict[int, int] = {}
        self.names = {TXN_C: ("tx-c", 0), TXN_A: ("tx-a", 0), TXN_O: ("tx-o", 0)}
        self.log_start = 0
        self.windows = 0

    def data(self, values: list[bytes], pid: int = PLAIN, *, txn: bool = False, key: bytes | None = None,
             compression: int = records.COMPRESSION_NONE) -> int:
        first = self.end
        self.batches.append(records.build_batch([(key, v, [("h", b"x")]) for v in values], base_offset=first,
                                                timestamp_ms=TS + first, producer_id=pid,
                                                producer_epoch=0 if pid >= 0 else -1, transactional=txn,
                                                compression=compression))
        self.end += len(values)
        if txn and pid not in self.open:
            self.open[pid] = first
        return first

    def marker(self, pid: int, commit: bool) -> int:
        at = self.end
        self.batches.append(records.build_control_batch(commit=commit, producer_id=pid, producer_epoch=0,
                                                        coordinator_epoch=3, timestamp_ms=TS + at, base_offset=at))
        first = self.open.pop(pid)
        if not commit:
            self.aborted.append(AbortedTxn(pid, first, at, min(self.open.values(), default=at)))
        self.end += 1
        return at

    @property
    def lso(self) -> int:
        return min(self.open.values(), default=self.end)

    def window(self, offset: int, max_bytes: int, read_committed: bool) -> Window:
        self.windows += 1
        upper = self.lso if read_committed else self.end
        at = min(max(offset, self.log_start), upper)
        out, total = [], 0
        for b in self.batches:
            h = records.parse_header(b)
            if h.last_offset < at or h.last_offset < self.log_start:
                continue
            if h.last_offset >= upper or (out and total + len(b) > max_bytes) or (not out and max_bytes == 0):
                break
            out.append(b)
            total += len(b)
        return Window(at, b"".join(out), self.log_start, self.end, self.lso, upper)

    def facts(self, first: int, last: int, producer_ids: frozenset[int]) -> TxnFacts:
        aborted = tuple(a for a in self.aborted if a.last_offset >= first and a.first_offset <= last)
        return TxnFacts(aborted, dict(self.open), dict(self.names), self.log_start, self.end, self.lso)

    def offset_for_timestamp(self, ts_ms: int) -> int:
        for b in self.batches:
            h = records.parse_header(b)
            if h.max_timestamp >= ts_ms:
                return h.base_offset
        return self.end


@pytest.fixture
def log() -> FakePartition:
    """0-1 plain; 2-3 committed (tx-c, marker 4); 5 aborted (tx-a, marker 6); 7 open (tx-o, the LSO);
    8 committed (tx-c, marker 9) above the LSO; 10 plain, above the LSO."""
    p = FakePartition()
    p.data([b"p0", b'{"a": 1}'])
    p.data([b"c2", b"c3"], TXN_C, txn=True, key=b"k")
    p.marker(TXN_C, True)
    p.data([b"a5"], TXN_A, txn=True)
    p.marker(TXN_A, False)
    p.data([b"o7"], TXN_O, txn=True)
    p.data([b"c8"], TXN_C, txn=True, compression=records.COMPRESSION_ZSTD)
    p.marker(TXN_C, True)
    p.data([b"p10"])
    return p


def q(text: str) -> messages.Query:
    return parse_query(text)


def fates(doc: dict) -> list[tuple[int, str]]:
    return [(r["offset"], r.get("marker") or r["fate"]) for r in doc["rows"]]


def test_everything_marks_each_records_fate_and_shows_the_markers(log: FakePartition) -> None:
    doc = page(log, q("topic=t&partition=0&isolation=everything&from=beginning"))
    assert fates(doc) == [(0, "plain"), (1, "plain"), (2, "committed"), (3, "committed"), (4, "COMMIT"),
                          (5, "aborted"), (6, "ABORT"), (7, "open"), (8, "committed"), (9, "COMMIT"), (10, "plain")]
    by = {r["offset"]: r for r in doc["rows"]}
    assert [o for o, r in by.items() if r["visible"]] == [0, 1, 2, 3]  # below the LSO (7), not aborted/open
    assert by[5]["transactional_id"] == "tx-a" and by[7]["transactional_id"] == "tx-o" and by[0]["transactional_id"] is None
    assert by[4]["kind"] == "marker" and by[4]["coordinator_epoch"] == 3 and by[4]["transactional_id"] == "tx-c"
    assert by[8]["fate"] == "committed" and not by[8]["visible"]  # committed, but above the LSO: not yet read
    assert base64.b64decode(by[8]["value"]["b64"]) == b"c8"  # a zstd batch decodes
    assert by[2]["key"]["format"] == "text" and by[2]["headers"] == [{"key": "h", "value": by[2]["headers"][0]["value"]}]
    assert (doc["lso"], doc["high_watermark"], doc["upper"], doc["more_after"]) == (7, 11, 11, False)


def test_read_committed_shows_what_a_read_committed_consumer_gets(log: FakePartition) -> None:
    doc = page(log, q("topic=t&partition=0&isolation=read_committed&from=beginning"))
    assert fates(doc) == [(0, "plain"), (1, "plain"), (2, "committed"), (3, "committed")]
    assert doc["upper"] == 7 and doc["next_offset"] == 7 and not doc["more_after"]
    log.marker(TXN_O, False)  # the open one aborts: the LSO moves to the end, 8 and 10 become visible
    doc = page(log, q("topic=t&partition=0&isolation=read_committed&offset=4"))
    assert fates(doc) == [(8, "committed"), (10, "plain")]


def test_pages_forwards_and_backwards(log: FakePartition) -> None:
    first = page(log, q("topic=t&partition=0&isolation=everything&offset=1&limit=3"))
    assert [r["offset"] for r in first["rows"]] == [1, 2, 3] and first["next_offset"] == 4 and first["more_after"]
    assert first["more_before"]
    nxt = page(log, q(f"topic=t&partition=0&isolation=everything&offset={first['next_offset']}&limit=3"))
    assert [r["offset"] for r in nxt["rows"]] == [4, 5, 6]
    back = page(log, q(f"topic=t&partition=0&isolation=everything&before={nxt['start_offset']}&limit=3"))
    assert [r["offset"] for r in back["rows"]] == [1, 2, 3] and back["more_before"]
    newest = page(log, q("topic=t&partition=0&isolation=everything&from=newest&limit=2"))
    assert [r["offset"] for r in newest["rows"]] == [9, 10] and not newest["more_after"]
    committed_newest = page(log, q("topic=t&partition=0&isolation=read_committed&from=newest&limit=3"))
    assert [r["offset"] for r in committed_newest["rows"]] == [1, 2, 3]  # the page ending at the LSO
    oldest = page(log, q("topic=t&partition=0&isolation=everything&before=2&limit=5"))
    assert [r["offset"] for r in oldest["rows"]] == [0, 1] and not oldest["more_before"]


def test_start_at_a_timestamp(log: FakePartition) -> None:
    doc = page(log, q(f"topic=t&partition=0&isolation=everything&ts={TS + 5}&limit=2"))
    assert [r["offset"] for r in doc["rows"]] == [5, 6]


def test_filter_by_key_or_value_substring(log: FakePartition) -> None:
    assert [r["offset"] for r in page(log, q("topic=t&partition=0&isolation=everything&q=c"))["rows"]] == [2, 3, 8]
    assert [r["offset"] for r in page(log, q("topic=t&partition=0&isolation=everything&q=k&in=key"))["rows"]] == [2, 3]
    assert page(log, q("topic=t&partition=0&isolation=everything&q=k&in=value"))["rows"] == []
    assert [r["offset"] for r in page(log, q("topic=t&partition=0&q=c"))["rows"]] == [2, 3]  # read_committed


def test_a_filter_does_bounded_work_and_says_where_it_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    p = FakePartition()
    for i in range(200):
        p.data([b"v%d-" % i + b"x" * 100] * 10)
    monkeypatch.setattr(messages, "SCAN_RECORDS", 500)
    monkeypatch.setattr(messages, "HOP_BYTES", 4096)
    doc = page(p, q("topic=t&partition=0&isolation=everything&from=beginning&q=nowhere"))
    assert doc["rows"] == [] and doc["scanned"]["budget_spent"]
    assert 500 <= doc["next_offset"] < 600 and doc["more_after"]  # where to go on from
    again = page(p, q(f"topic=t&partition=0&isolation=everything&offset={doc['next_offset']}&q=v199-"))
    assert again["rows"] == [] and again["next_offset"] < 2000  # still bounded: no match in its budget either


def test_a_batch_that_does_not_decode_is_a_row_saying_so(log: FakePartition) -> None:
    bad = bytearray(log.batches[0])
    bad[-1] ^= 0xFF  # the CRC no longer matches
    log.batches[0] = bytes(bad)
    doc = page(log, q("topic=t&partition=0&isolation=everything&from=beginning&limit=3"))
    assert doc["rows"][0]["kind"] == "error" and "CRC" in doc["rows"][0]["error"]
    assert [r["offset"] for r in doc["rows"][1:]] == [2, 3]


@pytest.mark.parametrize("text,why", [
    ("partition=0", "topic"), ("topic=t", "partition"), ("topic=t&partition=x", "partition"),
    ("topic=t&partition=0&isolation=read_uncommitted", "isolation"), ("topic=t&partition=0&limit=1000", "limit"),
    ("topic=t&partition=0&from=middle", "from"), ("topic=t&partition=0&q=" + "x" * 300, "q"),
    ("topic=t&partition=0&offset=-5", "offset"), ("topic=t&partition=0&in=headers&q=a", "in"),
    ("&".join(f"a{i}=1" for i in range(40)), "query fields"),
])
def test_bad_queries_are_refused(text: str, why: str) -> None:
    with pytest.raises(QueryError, match=why):
        parse_query(text)


def test_payloads_are_shown_as_json_text_or_binary_and_cut() -> None:
    assert shown(None, 10) is None
    assert shown(b'{"a": [1, 2]}', 100)["format"] == "json"
    assert shown(b"hello\nworld", 100)["format"] == "text"
    assert shown(b"\x00\x01\xff", 100)["format"] == "binary"
    cut = shown("é".encode() * 10, 5)  # a character cut in two at the end is still text
    assert cut == {"size": 20, "truncated": True, "format": "text", "b64": base64.b64encode("é".encode() * 2 + b"\xc3").decode()}
    assert shown(b'{"a": 1' + b" " * 100 + b"}", 10)["format"] == "text"  # cut JSON does not parse: text
    assert json.loads(json.dumps(shown(b"\xff" * 10_000, 8192)))["size"] == 10_000


def test_timeline_ranges_markers_and_the_open_range_at_the_lso(log: FakePartition) -> None:
    doc = timeline(log, "t", 0)
    got = [(r["fate"], r["first"], r["last"], r.get("marker"), r["transactional_id"]) for r in doc["ranges"]]
    assert got == [("plain", 0, 1, None, None), ("committed", 2, 3, 4, "tx-c"), ("aborted", 5, 5, 6, "tx-a"),
                   ("open", 7, 7, None, "tx-o"), ("committed", 8, 8, 9, "tx-c"), ("plain", 10, 10, None, None)]
    assert (doc["lso"], doc["high_watermark"], doc["complete"]) == (7, 11, True)
    assert doc["open"] == [{"producer_id": TXN_O, "first": 7, "transactional_id": "tx-o"}]
    assert [lane["transactional_id"] for lane in doc["lanes"]] == ["tx-c", "tx-a", "tx-o"]


def test_timeline_window_after_the_start_of_an_open_and_an_aborted_transaction(log: FakePartition) -> None:
    log.data([b"o11"], TXN_O, txn=True)
    doc = timeline(log, "t", 0, offset=6)
    by = {(r["fate"], r["producer_id"]): r for r in doc["ranges"]}
    assert by[("open", TXN_O)]["first"] == 7 and by[("open", TXN_O)]["last"] == 11  # the leader's first offset
    assert by[("aborted", TXN_A)] == {**by[("aborted", TXN_A)], "first": 5, "marker": 6, "clipped": True}
