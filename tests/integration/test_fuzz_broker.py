"""R22, issue 12: the decoder and the broker take mutated real-client traffic and stay up.

The corpus is recorded, not written by hand: confluent-kafka, kafka-python and aiokafka run
their usual workflows (admin, produce with every codec, idempotent and transactional
producers, consumer groups, offset commits) through a recording proxy in front of a broker.
Each frame is then mutated (bytes flipped, lengths made huge or null, frames cut short) and
sent to a fresh broker while a bystander keeps making requests. The broker must stay up, keep
answering the bystander quickly, never hit a handler bug ("bug:" in its log), and stop cleanly.

The broker has three listeners (issue 26): PLAINTEXT, SASL_PLAINTEXT and SASL_SSL. Each fuzzing
connection goes to one of them at random: on the SASL ones the mutated frames meet the SASL gate
(after a valid SaslHandshake half of the time, so they reach the mechanisms), mixed with mutated
SASL exchanges (handshakes, PLAIN and SCRAM tokens); on SASL_SSL through real TLS, and some
connections send a mutated TLS ClientHello instead. Two bystanders, one on PLAINTEXT and one
logged in over SASL_SSL, must be answered within the bound throughout.
The group and share APIs (ConsumerGroupHeartbeat, ShareGroupHeartbeat, ShareFetch,
ShareAcknowledge) reach the fuzzed broker's live state: before fuzzing, the recorded frames of
those APIs are sent to it unmutated, in recorded order (the members join with their own ids, a
share session opens), and a quarter of the fuzzed frames are mutations of them.
Diskless reads of damaged objects are fuzzed in process (``test_diskless_reads_of_damaged_
objects_never_serve_altered_bytes``): objects of real batches, damaged at random (bytes flipped,
cut short, deleted), read through the real read cache and engine; a batch is served exactly as it
was written or refused with CORRUPT_MESSAGE, and every batch the damage spared is served.
Every loop is bounded in count and time; the random generator is seeded, and the seed is in
the failure message.
"""

from __future__ import annotations

import os
import random
import select
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafka_clients import consume, create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess, free_port
from oncelog.protocol import apis, framing, records
from oncelog.protocol.errors import CorruptMessage, KafkaError, UnsupportedVersion
from oncelog_tools.tls_certs import Pki, make_pki
from oncelog_tools.verify.proxy import Proxy
from test_groups_share import set_group_configs
from txn_clients import TxnProducer

pytestmark = pytest.mark.integration
#: These tests measure how fast the broker answers: no spare broker starts next to them (conftest.py).
START_SPARE_BROKER_DURING_TESTS = False

#: How long the broker is fuzzed: 10 s in ``make test``, 30 s in ``make test-long`` (marker
#: ``long``); ``ONCELOG_FUZZ_SECONDS`` overrides both.
FUZZ_SECONDS = os.environ.get("ONCELOG_FUZZ_SECONDS")
SEED = int(os.environ.get("ONCELOG_FUZZ_SEED", "0")) or random.randrange(1, 2**31)


def _drive_clients(bootstrap: str) -> None:
    """Real clients doing what applications do, through the recording proxy."""
    for client in ("confluent", "kafka-python", "aiokafka"):
        topic = f"corpus-{client}"
        create_topic(client, bootstrap, topic, 2, {"retention.ms": "3600000"})
        for codec in (None, "gzip", "snappy", "lz4", "zstd"):
            produce(client, bootstrap, topic, [(i % 2, b"k%d" % i, b"v%d" % i) for i in range(20)], compression=codec)
        consume(client, bootstrap, topic, [0, 1], expected=100, timeout=60)
        tx = TxnProducer(client, bootstrap, f"corpus-tx-{client}")
        try:
            tx.init()
            tx.begin()
            tx.send(topic, b"tv", key=b"tk", partition=0)
            tx.commit()
            tx.begin()
            tx.send(topic, b"aborted", key=b"tk", partition=1)
            tx.abort()
        finally:
            tx.close()
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "corpus-group", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000})
    c.subscribe(["corpus-confluent"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not c.assignment():
        c.poll(0.2)
    c.commit(offsets=[TopicPartition("corpus-confluent", 0, 3)], asynchronous=False)
    c.committed([TopicPartition("corpus-confluent", 0)], timeout=10)
    c.close()
    # the consumer rebalance protocol (KIP-848, issue 30): ConsumerGroupHeartbeat and the
    # member-epoch versions of OffsetCommit / OffsetFetch join the corpus
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "corpus-group-848", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["corpus-confluent"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not c.assignment():
        c.poll(0.2)
    c.commit(offsets=[TopicPartition("corpus-confluent", 0, 3)], asynchronous=False)
    c.committed([TopicPartition("corpus-confluent", 0)], timeout=10)
    c.close()
    # share groups (KIP-932, issue 30): a group config, ShareGroupHeartbeat, ShareFetch with
    # acknowledgements, ShareAcknowledge and a final (epoch -1) request join the corpus
    from confluent_kafka import AcknowledgeType, ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource("GROUP", "corpus-share", incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)
    sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "corpus-share",
                        "share.acknowledgement.mode": "explicit"})
    sc.subscribe(["corpus-confluent"])
    deadline, kinds = time.monotonic() + 30, [AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT]
    got = 0
    while time.monotonic() < deadline and got < 20:
        for i, msg in enumerate(sc.poll(0.5) or []):
            if msg.error() is None:
                sc.acknowledge(msg, kinds[i % 3])
                got += 1
        sc.commit_sync(10)
    sc.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    proxy_port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("corpus") / "broker",
                      overrides={"group.initial.rebalance.delay.ms": "0", "advertised.port": str(proxy_port)})
    b.start()
    proxy = Proxy(proxy_port, b.port, record=True).start()
    try:
        _drive_clients(f"127.0.0.1:{proxy_port}")
        _CORPUS_TOPIC_IDS.update(_topic_ids(b.bootstrap))
    finally:
        proxy.close()
        assert b.stop() == 0, b.log_tail()
    frames = proxy.requests
    apis_seen = {struct.unpack(">h", f[4:6])[0] for f in frames}
    assert len(frames) > 100 and {apis.PRODUCE, apis.FETCH, apis.METADATA, apis.END_TXN, *GROUP_APIS} <= apis_seen, \
        apis_seen
    return frames


#: the corpus broker's topic ids (name -> 16 bytes), replaced by the fuzzed broker's in the frames
_CORPUS_TOPIC_IDS: dict[str, bytes] = {}
CORPUS_TOPICS = ("corpus-confluent", "corpus-kafka-python", "corpus-aiokafka")


def _topic_ids(bootstrap: str) -> dict[str, bytes]:
    from test_groups_share_protocol import _topic_id

    with ProtocolClient(bootstrap) as c:
        return {t: _topic_id(c, t).bytes for t in CORPUS_TOPICS}


def _with_topic_ids(corpus: list[bytes], ids: dict[str, bytes]) -> list[bytes]:
    """The corpus with the corpus broker's topic ids replaced by ``ids`` (the same names'): the
    requests that name topics by id (Fetch v13+, ShareFetch, ShareAcknowledge) reach real partitions."""
    out = []
    for f in corpus:
        for name, old in _CORPUS_TOPIC_IDS.items():
            if old in f:
                f = f.replace(old, ids[name])
        out.append(f)
    return out


#: the group and share APIs whose recorded frames are replayed first and fuzzed a quarter of the time
GROUP_APIS = (apis.CONSUMER_GROUP_HEARTBEAT, apis.SHARE_GROUP_HEARTBEAT, apis.SHARE_FETCH, apis.SHARE_ACKNOWLEDGE)


def _api(frame: bytes) -> int:
    return struct.unpack(">h", frame[4:6])[0]


def _replay_groups(bootstrap: str, corpus: list[bytes]) -> int:
    """Send the corpus's group and share frames unmutated, in recorded order, on one connection
    (answers read, nothing checked): the members and the share session they name are live when
    the fuzzing starts. Returns how many were sent."""
    frames = [f for f in corpus if _api(f) in GROUP_APIS]
    with ProtocolClient(bootstrap) as c:
        for f in frames:
            c.send_raw(f)
            c.recv_frame()
        # the consumer-protocol group and the share group are live
        m = c.classes(apis.LIST_GROUPS, 5)
        res = c.request(apis.LIST_GROUPS, m["ListGroupsRequest"](states_filter=(), types_filter=()), version=5)
        live = {(g.group_id, g.group_type) for g in res.groups}
        assert {("corpus-group-848", "consumer"), ("corpus-share", "share")} <= live, live
    return len(frames)


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    body = bytearray(frame[4:])
    kind = rng.randrange(5)
    if kind == 0:  # flip a few bytes after the request header's fixed part
        for _ in range(rng.randint(1, 4)):
            if len(body) > 8:
                body[rng.randrange(8, len(body))] = rng.randrange(256)
    elif kind == 1:  # a huge length (varint or int32) somewhere
        if len(body) > 9:
            pos = rng.randrange(8, len(body) - 1)
            huge = rng.choice([b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x32", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00"])
            body[pos:pos + len(huge)] = huge
    elif kind == 2:  # null markers
        for _ in range(rng.randint(1, 3)):
            if len(body) > 8:
                body[rng.randrange(8, len(body))] = rng.choice([0x00, 0xFF])
    elif kind == 3:  # cut short
        del body[rng.randrange(8, max(9, len(body))):]
    else:  # small integers made extreme
        if len(body) > 12:
            pos = rng.randrange(8, len(body) - 4)
            body[pos:pos + 4] = struct.pack(">i", rng.choice([-1, -2, 0, 2**31 - 1, -(2**31)]))
    return struct.pack(">i", len(body)) + bytes(body)


def test_decoder_takes_mutated_client_frames(corpus: list[bytes]) -> None:
    """In process: every mutation is decoded or refused with a FrameError, nothing else."""
    rng = random.Random(SEED)
    deadline = time.monotonic() + 15
    n = 0
    while time.monotonic() < deadline and n < 200_000:
        frame = _mutate(rng, rng.choice(corpus))
        try:
            framing.decode_request(frame[4:])
        except (framing.FrameError, UnsupportedVersion):
            pass
        except Exception as exc:  # pragma: no cover - the failure we are looking for
            pytest.fail(f"seed {SEED}: {type(exc).__name__}: {exc} on {frame.hex()}")
        n += 1
    assert n > 1000


PASSWORD = "fuzz-alice-pw"


def _sasl_corpus() -> list[bytes]:
    """Valid frames of SASL exchanges (every handshake and SaslAuthenticate version, PLAIN and
    SCRAM tokens, a bare v0 token), to be mutated like the recorded corpus."""
    cls = lambda k, v: apis.message_class(k, v, False)  # noqa: E731
    out = [framing.encode_request(apis.API_VERSIONS, 3, 1, "f", cls(apis.API_VERSIONS, 3)(
        client_software_name="fuzz", client_software_version="1"))]
    for v in (0, 1):
        for mech in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI"):
            out.append(framing.encode_request(apis.SASL_HANDSHAKE, v, 2, "f", cls(apis.SASL_HANDSHAKE, v)(mechanism=mech)))
    tokens = [b"\0alice\0" + PASSWORD.encode(), b"alice\0alice\0wrong", b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL",
              b"n,,n=nobody,r=abc", b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
              # issue 26: names no user can have (over 32,767 bytes; 100 KB of SCRAM SASLprep)
              b"\0" + b"u" * 40_000 + b"\0pw", b"n,,n=" + b"u" * 100_000 + b",r=abc"]
    for v in (0, 1, 2):
        for t in tokens:
            out.append(framing.encode_request(apis.SASL_AUTHENTICATE, v, 3, "f", cls(apis.SASL_AUTHENTICATE, v)(auth_bytes=t)))
    out += [len(t).to_bytes(4, "big") + t for t in tokens]  # bare tokens (after a v0 handshake)
    return out


def _client_hello(ctx: ssl.SSLContext) -> bytes:
    """A real TLS ClientHello, as this client would send it."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def _mutate_tls(rng: random.Random, hello: bytes) -> bytes:
    b = bytearray(hello)
    kind = rng.randrange(3)
    if kind == 0:
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 1:
        del b[rng.randrange(1, len(b)):]
    else:  # a record or handshake length made huge
        pos = rng.choice([3, 6])
        b[pos:pos + 2] = b"\xff\xff"
    return bytes(b)


def _fuzz_broker(broker_factory, tmp_path: Path) -> tuple[BrokerProcess, Pki, dict[str, int]]:
    """A broker with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners and the user alice."""
    pki = make_pki(tmp_path / "pki")
    r = subprocess.run([sys.executable, "-m", "oncelog", "users", "add", "alice", "--password", PASSWORD,
                        "--mechanism", "SCRAM-SHA-256", "--data-dir", str(tmp_path / "fuzzed")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    b = broker_factory("fuzzed", port=ports["PLAINTEXT"], overrides={
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "ssl.keystore.location": str(pki.server), "ssl.handshake.timeout.ms": "3000"})
    return b, pki, ports


@pytest.mark.parametrize("seconds", [10.0, pytest.param(30.0, marks=pytest.mark.long)], ids=["10s", "30s"])
def test_broker_takes_mutated_client_frames_and_serves_a_bystander(corpus: list[bytes], broker_factory,
                                                                   tmp_path: Path, seconds: float) -> None:
    from test_hostile_clients import Bystander

    seconds = float(FUZZ_SECONDS) if FUZZ_SECONDS else seconds
    broker, pki, ports = _fuzz_broker(broker_factory, tmp_path)
    for client in ("confluent",):  # the topics the corpus names exist, so requests reach handlers
        for name in CORPUS_TOPICS:
            create_topic(client, broker.bootstrap, name, 2)
    produce("confluent", broker.bootstrap, "corpus-confluent", [(i % 2, None, b"r%d" % i) for i in range(40)])
    set_group_configs(broker.bootstrap, "corpus-share", {"share.auto.offset.reset": "earliest"})
    corpus = _with_topic_ids(corpus, _topic_ids(broker.bootstrap))
    assert _replay_groups(broker.bootstrap, corpus) >= 4
    group_frames = [f for f in corpus if _api(f) in GROUP_APIS]
    rng = random.Random(SEED)
    sasl_corpus = _sasl_corpus()
    auth_frames = [f for f in sasl_corpus if f[4:6] == struct.pack(">h", apis.SASL_AUTHENTICATE)]
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    hello = _client_hello(ctx)
    sent = closed = group_sent = 0
    per_listener = {"PLAINTEXT": 0, "SASL_PLAINTEXT": 0, "SASL_SSL": 0, "TLS hello": 0}
    sock: socket.socket | None = None
    sasl_security = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanism": "SCRAM-SHA-256",
                     "sasl.username": "alice", "sasl.password": PASSWORD}
    with Bystander(broker.bootstrap) as bystander, Bystander(f"127.0.0.1:{ports['SASL_SSL']}", sasl_security) as tls_bystander:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and sent < 50_000:
            if rng.random() < 0.02:  # a mutated ClientHello on a connection of its own, then leave
                with socket.create_connection(("127.0.0.1", ports["SASL_SSL"]), timeout=5) as raw:
                    try:
                        raw.sendall(_mutate_tls(rng, hello))
                        select.select([raw], [], [], 0.005)
                    except OSError:
                        pass
                sent += 1
                per_listener["TLS hello"] += 1
            if sock is None:
                target = rng.choice(["PLAINTEXT", "PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"])
                raw = socket.create_connection(("127.0.0.1", ports[target]), timeout=5)
                try:
                    sock = ctx.wrap_socket(raw, server_hostname="localhost") if target == "SASL_SSL" else raw
                    if target != "PLAINTEXT" and rng.random() < 0.5:  # reach the mechanisms
                        mech = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
                        v = rng.choice([0, 1])
                        sock.sendall(framing.encode_request(apis.SASL_HANDSHAKE, v, 1, "f",
                                                            apis.message_class(apis.SASL_HANDSHAKE, v, False)(mechanism=mech)))
                        if v == 1 and rng.random() < 0.5:  # a whole token first: the mechanism runs
                            sock.sendall(rng.choice(auth_frames))
                except OSError:
                    raw.close()
                    closed += 1
                    continue
                sock.settimeout(2)
            frames = corpus if target == "PLAINTEXT" or rng.random() < 0.4 else sasl_corpus
            if frames is corpus and rng.random() < 0.25:
                frames = group_frames
                group_sent += 1
            try:
                sock.sendall(_mutate(rng, rng.choice(frames)))
                sent += 1
                per_listener[target] += 1
                readable, _, _ = select.select([sock], [], [], 0.002)
                if readable:
                    sock.setblocking(False)
                    try:
                        if not sock.recv(1 << 20):
                            raise ConnectionResetError
                    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        pass
                    finally:
                        sock.settimeout(2)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # ssl.SSLError included
                closed += 1
                sock.close()
                sock = None
            assert broker.proc.poll() is None, f"seed {SEED}: broker died:\n{broker.log_tail()}"
        if sock is not None:
            sock.close()
    lines = broker.log_path.read_text(errors="replace").splitlines()
    bugs = [i for i, line in enumerate(lines) if "bug:" in line or "Traceback" in line]
    assert not bugs, f"seed {SEED}: a handler raised:\n" + "\n".join(line[:300] for line in lines[bugs[0]:bugs[0] + 12])
    assert sent > 500 and closed > 10, (sent, closed, per_listener)
    assert min(per_listener.values()) > 10 and group_sent > 10, (SEED, per_listener, group_sent)
    assert bystander.worst < 2.0, f"seed {SEED}: bystander waited {bystander.worst:.2f} s"
    assert tls_bystander.worst < 2.0, f"seed {SEED}: the SASL_SSL bystander waited {tls_bystander.worst:.2f} s"
    produce("confluent", broker.bootstrap, "after-fuzz", [(0, None, b"alive")])
    assert consume("aiokafka", broker.bootstrap, "after-fuzz", [0], expected=1, timeout=30)[-1][3] == b"alive"
    with ProtocolClient(f"127.0.0.1:{ports['SASL_PLAINTEXT']}", security={**sasl_security, "security.protocol": "SASL_PLAINTEXT"}) as c:
        assert c.request(apis.API_VERSIONS, apis.message_class(apis.API_VERSIONS, 3, False)(
            client_software_name="x", client_software_version="1"), version=3).error_code == 0


# -- diskless reads of damaged objects (in process) ------------------------------------------------

class _DamagedStore:
    """An object store holding one object, damaged: ``get_range`` answers as S3 would for it."""

    def __init__(self, key: str, data: bytes | None) -> None:
        self.key, self.data = key, data

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        from oncelog.diskless.object_store import ObjectNotFound, ObjectTruncated

        if self.data is None or key != self.key:
            raise ObjectNotFound(f"object {key} not found")
        if start >= len(self.data):
            raise ObjectTruncated(f"object {key} ends before byte {start}")
        if end > len(self.data):
            raise ObjectTruncated(f"object {key} ends at byte {len(self.data)}", self.data[start:])
        return self.data[start:end]


class _NoWriter:
    def register(self, partition_id: int, listener: object) -> None:
        pass

    def unregister(self, partition_id: int, listener: object) -> None:
        pass


def _damage(rng: random.Random, obj: bytes) -> bytes | None:
    b = bytearray(obj)
    kind = rng.randrange(6)
    if kind == 0:
        return None  # deleted (or its bucket)
    if kind == 1:
        return bytes(b[:rng.randrange(len(b))])  # cut short
    for _ in range(rng.randint(1, 8 if kind < 5 else 1)):  # bytes flipped anywhere (kind 5: one byte)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def _read_all(plog, coords, cache) -> dict[int, bytes | str]:  # type: ignore[no-untyped-def]
    """Every batch of ``plog`` read from offset 0: base offset -> the bytes served, or "refused"."""
    import asyncio

    out: dict[int, bytes | str] = {}

    async def go() -> None:
        offset, end = 0, coords[-1].last_offset + 1
        for _ in range(10 * len(coords) + 10):  # bounded: a read serves, loads or refuses each time
            if offset >= end:
                return
            try:
                parts = plog.read(offset, 1 << 20)
            except CorruptMessage:
                c = next(c for c in coords if c.base_offset <= offset <= c.last_offset)
                out[c.base_offset] = "refused"
                offset = c.last_offset + 1
                continue
            if not parts:
                for _ in range(20):  # the background load lands
                    await asyncio.sleep(0)
                continue
            data = parts[0]
            pos = 0
            while pos < len(data):
                h = records.parse_header(data, pos)
                out[h.base_offset] = data[pos:pos + h.size]
                pos += h.size
                offset = h.next_offset
        raise AssertionError(f"no end to the reads (at offset {offset})")

    asyncio.run(go())
    return out


@pytest.mark.parametrize("seconds", [3.0, pytest.param(20.0, marks=pytest.mark.long)], ids=["3s", "20s"])
def test_diskless_reads_of_damaged_objects_never_serve_altered_bytes(seconds: float) -> None:
    """An object of 1-12 real batches, damaged at random, read through the broker's read cache
    (diskless/cache.py) and the diskless engine: each batch is served exactly as written (its
    offsets and leader epoch from its coordinates) or refused with CORRUPT_MESSAGE; a batch the
    damage left whole is served; no other exception comes out."""
    from oncelog.cluster.leadership import Leadership
    from oncelog.diskless import layout
    from oncelog.diskless.cache import ByteCache
    from oncelog.storage.config import LogConfig
    from oncelog.storage.engines.diskless.log import Committed, DisklessPartitionLog

    rng = random.Random(SEED)
    deadline = time.monotonic() + seconds
    runs = refused = 0
    while time.monotonic() < deadline and runs < 5_000:
        batches, coords, base = [], [], 0
        for _ in range(rng.randint(1, 12)):
            n = rng.randint(1, 5)
            recs = [(None, bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))), ()) for _ in range(n)]
            batches.append(records.build_batch(recs, base_offset=base, timestamp_ms=1_000,
                                               compression=rng.choice([0, 0, 1, 4])))
            base += n
        key = layout.new_key(1, "fuzz", 1_000)
        obj, entries = layout.build(1, 1_000, [(42, b) for b in batches])
        base = 0
        for b, e in zip(batches, entries):
            h = records.parse_header(b)
            coords.append(Committed(base, base + h.last_offset_delta, e.size, key, e.byte_offset, 3, None))
            base += h.last_offset_delta + 1
        damaged = _damage(rng, obj)
        cache = ByteCache(_DamagedStore(key, damaged), 1 << 24, coalesce_gap=rng.choice([0, 1 << 16]))  # type: ignore[arg-type]
        plog = DisklessPartitionLog(None, _NoWriter(), Leadership(42, "dl", 0, 1, 3, 0, base), LogConfig(), cache)  # type: ignore[arg-type]
        plog._committed(coords)
        try:
            served = _read_all(plog, coords, cache)
        except KafkaError as exc:
            pytest.fail(f"seed {SEED}, run {runs}: {type(exc).__name__}: {exc}")
        for c, original in zip(coords, batches):
            want = records.offset_prefix(original, c.base_offset, 3) + original[16:]
            got = served.get(c.base_offset)
            at = c.byte_offset
            spared = damaged is not None and at + c.size <= len(damaged) and (  # all but the stamped bytes
                damaged[at + 8:at + 12] == original[8:12] and damaged[at + 16:at + c.size] == original[16:])
            if got == "refused":
                refused += 1
                assert not spared, f"seed {SEED}, run {runs}: a batch the damage spared was refused"
            else:
                assert got == want, f"seed {SEED}, run {runs}: batch at {c.base_offset} served altered"
        runs += 1
    assert runs > 20 and refused > 0, (runs, refused)
