"""R22, issue 12: the decoder and the broker take mutated real-client traffic and stay up.

The corpus is recorded, not written by hand: confluent-kafka, kafka-python and aiokafka run
their usual workflows (admin, produce with every codec, idempotent and transactional
producers, consumer groups, offset commits) through a recording proxy in front of a broker.
Each frame is then mutated (bytes flipped, lengths made huge or null, frames cut short) and
sent to a fresh broker while a bystander keeps making requests. The broker must stay up, keep
answering the bystander quickly, never hit a handler bug ("bug:" in its log), and stop cleanly.
Every loop is bounded in count and time; the random generator is seeded, and the seed is in
the failure message.
"""

from __future__ import annotations

import os
import random
import select
import socket
import struct
import time

import pytest

from kafka_clients import consume, create_topic, produce
from oncelog.process import BrokerProcess, free_port
from oncelog.protocol import apis, framing
from oncelog.protocol.errors import UnsupportedVersion
from oncelog_tools.verify.proxy import Proxy
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


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    proxy_port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("corpus") / "broker",
                      overrides={"group.initial.rebalance.delay.ms": "0", "advertised.port": str(proxy_port)})
    b.start()
    proxy = Proxy(proxy_port, b.port, record=True).start()
    try:
        _drive_clients(f"127.0.0.1:{proxy_port}")
    finally:
        proxy.close()
        assert b.stop() == 0, b.log_tail()
    frames = proxy.requests
    apis_seen = {struct.unpack(">h", f[4:6])[0] for f in frames}
    assert len(frames) > 100 and {apis.PRODUCE, apis.FETCH, apis.METADATA, apis.END_TXN} <= apis_seen, apis_seen
    return frames


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


@pytest.mark.parametrize("seconds", [10.0, pytest.param(30.0, marks=pytest.mark.long)], ids=["10s", "30s"])
def test_broker_takes_mutated_client_frames_and_serves_a_bystander(corpus: list[bytes], broker, seconds: float) -> None:
    from test_hostile_clients import Bystander

    seconds = float(FUZZ_SECONDS) if FUZZ_SECONDS else seconds
    for client in ("confluent",):  # the topics the corpus names exist, so requests reach handlers
        for name in ("corpus-confluent", "corpus-kafka-python", "corpus-aiokafka"):
            create_topic(client, broker.bootstrap, name, 2)
    rng = random.Random(SEED)
    sent = closed = 0
    sock: socket.socket | None = None
    with Bystander(broker.bootstrap) as bystander:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and sent < 50_000:
            if sock is None:
                sock = socket.create_connection((broker.host, broker.port), timeout=5)
                sock.setblocking(False)
            try:
                sock.sendall(_mutate(rng, rng.choice(corpus)))
                sent += 1
                readable, _, _ = select.select([sock], [], [], 0.002)
                if readable and not sock.recv(1 << 20):
                    raise ConnectionResetError
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                closed += 1
                sock.close()
                sock = None
            assert broker.proc.poll() is None, f"seed {SEED}: broker died:\n{broker.log_tail()}"
        if sock is not None:
            sock.close()
    lines = broker.log_path.read_text(errors="replace").splitlines()
    bugs = [i for i, line in enumerate(lines) if "bug:" in line]
    assert not bugs, f"seed {SEED}: a handler raised:\n" + "\n".join(lines[bugs[0]:bugs[0] + 12])
    assert sent > 500 and closed > 10
    assert bystander.worst < 2.0, f"seed {SEED}: bystander waited {bystander.worst:.2f} s"
    produce("confluent", broker.bootstrap, "after-fuzz", [(0, None, b"alive")])
    assert consume("aiokafka", broker.bootstrap, "after-fuzz", [0], expected=1, timeout=30)[-1][3] == b"alive"

