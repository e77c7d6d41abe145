"""The registry's storage: the compacted topic ``_schemas`` (``kafkastore.topic``), read and
written through the broker's own Kafka listener with confluent-kafka, as Confluent's registry
keeps its ``KafkaStore``. So the schemas are stored, replicated and recovered like every other
record, in embedded and in cluster mode, and the state is the same on every broker that serves
the registry.

Reading. One consumer per broker, assigned partition 0 from the beginning, read_committed, on
its own thread, applies every record to the ``RegistryState`` (under ``lock``) and records its
position. ``ready`` is set once it has reached the end it saw at start.

Writing, and why ids are unique across brokers. Every registry writes with one transactional
producer whose ``transactional.id`` is the same on every broker (``oncelog-schema-registry-
<topic>``). A write is: take the broker-local write lock; make sure this broker's producer is
the registered one (``init_transactions``: this fences any other broker's producer and aborts
its open transaction); read ``_schemas`` to its end (everything before it is decided); plan
the write from that state (planner.py); append the records in one transaction and commit;
read again until the state holds them; answer. If another broker initialized the id meanwhile,
this commit fails (the producer is fenced): the producer is made again and the whole write is
planned again from the new end (at most ``WRITE_ATTEMPTS`` times). Two brokers therefore never
commit records planned from the same state: ids and versions are given once, cluster-wide, and
any broker may take writes (nothing is forwarded).

Blocking: every method here blocks and is called from the HTTP worker threads or the reader's
own thread, never from the event loop.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from oncelog.schema_registry import errors
from oncelog.schema_registry.planner import Plan
from oncelog.schema_registry.state import RegistryState

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 5
#: how long a write waits for the store (each step)
STORE_TIMEOUT_S = 15.0
POLL_S = 0.05


class SchemaStore:
    """``bootstrap``: the broker's listener (``HOST:PORT``, known once it listens); ``client``:
    extra librdkafka properties (security) for the registry's clients."""

    def __init__(self, bootstrap: Callable[[], str], *, topic: str = "_schemas", default_level: str = "BACKWARD",
                 client: dict[str, str] | None = None) -> None:
        self._bootstrap = bootstrap
        self.topic = topic
        self.client = dict(client or {})
        self.state = RegistryState(default_level)
        self.lock = threading.RLock()
        self._progress = threading.Condition(self.lock)
        self._write_lock = threading.Lock()
        self.position = 0  # the reader's next offset
        # catch_up asks the reader thread for the topic's end (the consumer is used by its own
        # thread only): a question numbered ``_asked`` is answered once ``_answered`` reaches it
        self._asked = 0
        self._answered = 0
        self._end_seen: int | None = None
        self.ready = threading.Event()
        self.failed: str | None = None  # why the reader could not start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Any = None
        self._producer: Any = None

    # -- lifecycle ----------------------------------------------------------------------------

    def _conf(self, **extra: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self._bootstrap(), "client.id": "oncelog-schema-registry",
                                "log_level": 3, "socket.timeout.ms": 10_000}
        conf.update(self.client)
        conf.update(extra)
        return conf

    def start(self) -> None:
        """Create the topic if missing and start reading (returns at once; ``ready`` says when
        the state is loaded)."""
        self._thread = threading.Thread(target=self._run, name="oncelog-schema-store", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._write_lock:
            if self._producer is not None:
                self._producer.flush(2)
                self._producer = None

    def _create_topic(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self._conf())
        md = admin.list_topics(timeout=STORE_TIMEOUT_S)
        if self.topic in md.topics and not md.topics[self.topic].error:
            self._check_compacted(admin)
            return
        fut = admin.create_topics([NewTopic(self.topic, 1, config={"cleanup.policy": "compact"})],
                                  request_timeout=STORE_TIMEOUT_S)[self.topic]
        try:
            fut.result(STORE_TIMEOUT_S)
            log.info("schema registry: created topic %s (compacted, 1 partition)", self.topic)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise

    def _check_compacted(self, admin: Any) -> None:
        from confluent_kafka.admin import ConfigResource

        res = ConfigResource("topic", self.topic)
        try:
            configs = admin.describe_configs([res], request_timeout=STORE_TIMEOUT_S)[res].result(STORE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a warning, not a refusal
            log.warning("schema registry: cannot read the configs of %s: %s", self.topic, exc)
            return
        policy = configs.get("cleanup.policy")
        if policy is not None and "compact" not in policy.value:
            log.warning("schema registry: topic %s has cleanup.policy=%s; it should be compact (schemas older than "
                        "the retention would be lost)", self.topic, policy.value)

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        deadline = time.monotonic() + 120
        while not self._stop.is_set():
            try:
                self._create_topic()
                break
            except (KafkaException, Exception) as exc:  # noqa: BLE001 - retried until the broker answers
                if time.monotonic() > deadline:
                    self.failed = f"cannot create or find topic {self.topic}: {exc}"
                log.warning("schema registry: topic %s not ready (%s); retrying", self.topic, exc)
                self._stop.wait(1.0)
        consumer = Consumer(self._conf(**{"group.id": "oncelog-schema-registry-reader",
                                          "enable.auto.commit": False, "isolation.level": "read_committed",
                                          "fetch.wait.max.ms": 100, "enable.partition.eof": False}))
        tp = TopicPartition(self.topic, 0, 0)
        consumer.assign([tp])
        self._consumer = consumer
        try:
            target = self._end(consumer)
            while not self._stop.is_set():
                msgs = consumer.consume(500, POLL_S)
                with self.lock:
                    for m in msgs:
                        if m.error():
                            log.debug("schema registry: read error %s", m.error())
                            continue
                        self.state.apply_raw(m.key(), m.value())
                    pos = consumer.position([TopicPartition(self.topic, 0)])[0].offset
                    if pos >= 0 and pos != self.position:
                        self.position = pos
                    self._progress.notify_all()
                if self._answered < self._asked:
                    asked = self._asked
                    end = self._end(consumer)
                    with self._progress:
                        self._end_seen = end
                        self._answered = asked
                        self._progress.notify_all()
                if not self.ready.is_set() and (target is None or self.position >= target):
                    if target is None:
                        target = self._end(consumer)
                        continue
                    self.ready.set()
                    log.info("schema registry: loaded %d record(s) of %s: %d subject(s), largest id %d",
                             self.state.records, self.topic, len(self.state.subjects), self.state.max_id)
        except Exception:  # noqa: BLE001 - logged; the registry answers 50001 from then on
            log.exception("schema registry: the reader of %s stopped", self.topic)
            self.failed = "the reader of the store stopped"
        finally:
            consumer.close()

    def _end(self, consumer: Any) -> int | None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=STORE_TIMEOUT_S,
                                                     cached=False)
            return int(high)
        except KafkaException as exc:
            log.debug("schema registry: end offset of %s: %s", self.topic, exc)
            return None

    # -- reads and writes ---------------------------------------------------------------------

    def wait_ready(self, timeout: float = STORE_TIMEOUT_S) -> None:
        """Raises RegistryError (50002) when the state is not loaded within ``timeout``."""
        if not self.ready.wait(timeout):
            raise errors.timeout(self.failed or f"the registry is still loading {self.topic}")

    def catch_up(self, timeout: float = STORE_TIMEOUT_S) -> None:
        """Returns once the state holds every record the topic had when called. Raises
        RegistryError (50002)."""
        if self._consumer is None:
            raise errors.timeout(self.failed or "the store is starting")
        deadline = time.monotonic() + timeout
        with self._progress:
            self._asked += 1
            asked = self._asked
            while self._answered < asked:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.timeout(f"asking the end of {self.topic}")
                self._progress.wait(min(left, 0.5))
            target = self._end_seen
            if target is None:
                raise errors.store_error(f"cannot read the end of {self.topic}")
            while self.position < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.timeout(f"reading {self.topic} to offset {target} (at {self.position})")
                self._progress.wait(min(left, 0.5))

    def read(self, question: Callable[[RegistryState], Any]) -> Any:
        """``question`` asked of the state under the lock (after the first load)."""
        self.wait_ready()
        with self.lock:
            return question(self.state)

    def write(self, plan: Callable[[RegistryState], Plan]) -> Any:
        """Plan from the latest state and append, fenced as the module docstring says; returns
        the plan's answer. Raises the plan's RegistryError, or 50001/50002."""
        from confluent_kafka import KafkaException

        self.wait_ready()
        last: Exception | None = None
        with self._write_lock:
            for _ in range(WRITE_ATTEMPTS):
                try:
                    producer = self._owned_producer()
                    self.catch_up()
                    with self.lock:
                        decided = plan(self.state)
                    if not decided.records:
                        return decided.answer
                    producer.begin_transaction()
                    for key, value in decided.records:
                        producer.produce(self.topic, key=key, value=value, partition=0)
                    producer.commit_transaction(STORE_TIMEOUT_S)
                    self.catch_up()
                    return decided.answer
                except KafkaException as exc:
                    last = exc
                    err = exc.args[0]
                    log.info("schema registry: write attempt failed (%s); planning it again", err)
                    if err.txn_requires_abort():
                        try:
                            self._producer.abort_transaction(STORE_TIMEOUT_S)
                        except KafkaException:
                            self._producer = None
                    else:
                        self._producer = None  # fenced or fatal: a new producer, initialized again
        raise errors.store_error(f"the write did not commit after {WRITE_ATTEMPTS} attempts: {last}")

    def _owned_producer(self) -> Any:
        from confluent_kafka import Producer

        if self._producer is None:
            p = Producer(self._conf(**{"transactional.id": f"oncelog-schema-registry-{self.topic}",
                                       "enable.idempotence": True, "transaction.timeout.ms": 60_000,
                                       "linger.ms": 0}))
            p.init_transactions(STORE_TIMEOUT_S)
            self._producer = p
        return self._producer
