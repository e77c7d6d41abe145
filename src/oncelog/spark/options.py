"""Options of the ``oncelog`` data source, named like Spark's Kafka connector.

Spark hands a data source its options as a case-insensitive mapping of strings. This module
turns them into two small frozen dataclasses — ``SourceOptions`` and ``SinkOptions`` — and the
librdkafka configuration dicts built from them, so that every other module works with typed,
validated values. It imports neither Spark nor a Kafka client, so it is tested on its own.

``kafka.<property>`` options are passed to the client as ``<property>`` (``kafka.bootstrap.servers``
is required), as Spark's connector does. A few client properties are forced because the
connector's correctness depends on them; they are listed in ``FORCED_CONSUMER``/``FORCED_PRODUCER``
and a conflicting user value is an error rather than being silently overridden.

Validation raises ``ValueError`` with the option's name in the message; Spark shows it to the
user when the query starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from oncelog.spark import offsets as off

KAFKA_PREFIX = "kafka."

#: Consumer properties the reader needs: it tracks positions itself (no auto commit) and relies
#: on end-of-partition events to finish a range that ends in a gap.
FORCED_CONSUMER = {"enable.auto.commit": "false", "enable.partition.eof": "true"}
#: Consumer defaults for reading bounded ranges fast (a ``kafka.*`` option overrides them).
#: librdkafka postpones the next fetch by ``fetch.queue.backoff.ms`` (1 s by default) whenever
#: its local queue holds ``queued.min.messages``, and a range reader drains that queue in bursts:
#: with the defaults a task reads ~115,000 records/s, with these ~450,000 (measured here with
#: 100-byte records). A short ``fetch.wait.max.ms`` also lets a range that ends at the log end
#: or LSO finish without waiting half a second for the end-of-partition event. The consumer is
#: assigned only while a range is read, so the short wait costs no idle polling.
CONSUMER_DEFAULTS = {"fetch.queue.backoff.ms": "0", "fetch.wait.max.ms": "10"}
#: Producer defaults: room for a whole task's rows in the client queue (a full queue makes the
#: writer wait), batches bounded by bytes (``batch.size``) rather than by count, and eager
#: connections: with librdkafka's sparse connections a new transactional producer often finds
#: no connected broker for FindCoordinator and waits for its 500 ms PID timer —
#: init_transactions took 55 ms, or 505 ms one time in three; eagerly connected, 3-10 ms.
PRODUCER_DEFAULTS = {
    "linger.ms": "5", "queue.buffering.max.messages": "1000000", "batch.num.messages": "100000",
    "enable.sparse.connections": "false",
}
#: Defaults of every client the connector creates (a ``kafka.*`` option overrides them).
#: librdkafka 2.10+ re-bootstraps when every broker it knows is down — which a single broker's
#: restart is — and decommissions the broker handles it had; a group coordinator cached on such
#: a handle is then waited for forever, past the call's timeout (librdkafka #5511, #5456): a
#: transactional producer's ``send_offsets_to_transaction`` never returns and the query stalls
#: (issue 13). Without re-bootstrapping the client just reconnects to the brokers it knows.
#: The watchdog (guard.py) bounds every call regardless. Reconnects back off to 1 s at most (Java
#: client's default; librdkafka's is 10 s), so a restarted broker is found again within a second.
CLIENT_DEFAULTS = {"metadata.recovery.strategy": "none", "reconnect.backoff.max.ms": "1000"}
#: The at-least-once writer still never writes a record twice on a retried *request*.
FORCED_PRODUCER = {"enable.idempotence": "true"}

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"


def _lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _int(opts: dict[str, str], name: str, default: int | None, *, minimum: int | None = None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {name}: expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"option {name}: must be >= {minimum}, got {value}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}: expected true or false, got {raw!r}")


def kafka_properties(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix. Raises if bootstrap servers are missing."""
    props = {k[len(KAFKA_PREFIX):]: v for k, v in _lower_keys(options).items() if k.startswith(KAFKA_PREFIX)}
    if not props.get("bootstrap.servers"):
        raise ValueError("option kafka.bootstrap.servers is required")
    return props


def _apply_forced(props: dict[str, str], forced: Mapping[str, str], role: str) -> dict[str, str]:
    for k, v in forced.items():
        if k in props and props[k].lower() != v:
            raise ValueError(f"option kafka.{k}={props[k]} is not allowed: the {role} needs {k}={v}")
        props[k] = v
    return props


@dataclass(frozen=True)
class SourceOptions:
    """What the reader was asked to read. Exactly one of subscribe/pattern/assign is set."""

    client: dict[str, str]
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[off.TopicPartition, ...] = ()
    starting: str | off.PartitionOffsets = "latest"
    ending: str | off.PartitionOffsets = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    group_for_lag: str | None = None
    group_id_prefix: str = "spark-oncelog-source"
    poll_timeout_ms: int = 120_000
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    isolation_level: str = field(default="read_committed")

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> "SourceOptions":
        opts = _lower_keys(options)
        client = {**CLIENT_DEFAULTS, **kafka_properties(options)}
        chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
        if len(chosen) != 1:
            raise ValueError("exactly one of the options subscribe, subscribePattern, assign must be set")
        subscribe: tuple[str, ...] = ()
        pattern = None
        assign: tuple[off.TopicPartition, ...] = ()
        if chosen[0] == "subscribe":
            subscribe = tuple(sorted({t.strip() for t in opts["subscribe"].split(",") if t.strip()}))
            if not subscribe:
                raise ValueError("option subscribe: no topic named")
        elif chosen[0] == "subscribepattern":
            pattern = opts["subscribepattern"]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"option subscribePattern: {exc}") from None
        else:
            assign = tuple(off.parse_assign(opts["assign"]))

        starting = off.parse_offsets_option(opts.get("startingoffsets", "latest" if streaming else "earliest"), name="startingOffsets")
        ending: str | off.PartitionOffsets = "latest"
        if "endingoffsets" in opts:
            if streaming:
                raise ValueError("option endingOffsets is for batch queries only")
            ending = off.parse_offsets_option(opts["endingoffsets"], name="endingOffsets")
            if ending == "earliest" or (isinstance(ending, dict) and off.EARLIEST in ending.values()):
                raise ValueError("option endingOffsets: 'earliest' (-2) is not allowed")
        if not streaming and (starting == "latest" or (isinstance(starting, dict) and off.LATEST in starting.values())):
            raise ValueError("option startingOffsets: 'latest' (-1) is not allowed in batch queries")

        isolation = client.get("isolation.level", "read_committed").lower()
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"option kafka.isolation.level: expected read_committed or read_uncommitted, got {isolation!r}")
        client["isolation.level"] = isolation
        max_offsets = _int(opts, "maxOffsetsPerTrigger", None, minimum=1)
        fail_on_data_loss = _bool(opts, "failOnDataLoss", True)
        client.setdefault("auto.offset.reset", "error" if fail_on_data_loss else "earliest")
        _apply_forced(client, FORCED_CONSUMER, "reader")
        return cls(
            client=client,
            subscribe=subscribe,
            pattern=pattern,
            assign=assign,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=max_offsets,
            fail_on_data_loss=fail_on_data_loss,
            include_headers=_bool(opts, "includeHeaders", False),
            group_for_lag=opts.get("groupidforlag") or None,
            group_id_prefix=opts.get("groupidprefix", "spark-oncelog-source"),
            poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", 120_000, minimum=1) or 120_000,
            fetch_offset_retries=_int(opts, "fetchOffset.numRetries", 3, minimum=0) or 0,
            fetch_offset_retry_interval_ms=_int(opts, "fetchOffset.retryIntervalMs", 1000, minimum=0) or 0,
            isolation_level=isolation,
        )

    def consumer_config(self) -> dict[str, str]:
        """Configuration of the executors' range consumers (assign only, never subscribe)."""
        conf = {**CONSUMER_DEFAULTS, **self.client}
        conf.setdefault("group.id", f"{self.group_id_prefix}-executor")
        return conf

    def admin_config(self) -> dict[str, str]:
        """Configuration of the driver's AdminClient (consumer-only properties dropped)."""
        consumer_only = {
            "group.id", "isolation.level", "auto.offset.reset", "enable.auto.commit", "enable.partition.eof",
            "fetch.min.bytes", "fetch.max.bytes", "fetch.wait.max.ms", "max.partition.fetch.bytes",
            "queued.min.messages", "queued.max.messages.kbytes", "session.timeout.ms", "heartbeat.interval.ms",
            "max.poll.interval.ms", "auto.commit.interval.ms", "check.crcs", "group.instance.id",
            "partition.assignment.strategy", "enable.auto.offset.store", "fetch.queue.backoff.ms",
        }
        return {k: v for k, v in self.client.items() if k not in consumer_only}


@dataclass(frozen=True)
class SinkOptions:
    """What the writer was asked to do. ``topic`` overrides a ``topic`` column, as in Spark.

    ``delivery.guarantee`` is ``exactly_once`` unless the user opts into ``at_least_once``
    (issue 13: the obvious code must get what the project promises). ``requestTimeoutMs`` bounds
    each client call of the sink, ``flushTimeoutMs`` the flush and commit of a task."""

    client: dict[str, str]
    topic: str | None = None
    guarantee: str = EXACTLY_ONCE
    transactional_id_prefix: str = "oncelog-spark"
    input_offsets_group: str | None = None
    write_id: str | None = None
    flush_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        opts = _lower_keys(options)
        client = {**CLIENT_DEFAULTS, **kafka_properties(options)}
        guarantee = opts.get("delivery.guarantee", EXACTLY_ONCE).strip().lower().replace("-", "_")
        if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
            raise ValueError(f"option delivery.guarantee: expected {AT_LEAST_ONCE} or {EXACTLY_ONCE}, got {guarantee!r}")
        if "transactional.id" in client:
            raise ValueError(
                "option kafka.transactional.id is not allowed: the exactly-once writer derives one id per "
                "(query, task partition) from transactionalIdPrefix"
            )
        _apply_forced(client, FORCED_PRODUCER, "writer")
        prefix = opts.get("transactionalidprefix", "oncelog-spark")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", prefix):
            raise ValueError(f"option transactionalIdPrefix: use letters, digits, '.', '_' and '-', got {prefix!r}")
        return cls(
            client=client,
            topic=opts.get("topic") or None,
            guarantee=guarantee,
            transactional_id_prefix=prefix,
            input_offsets_group=opts.get("inputoffsetsgroup") or None,
            write_id=opts.get("writeid") or None,
            flush_timeout_ms=_int(opts, "flushTimeoutMs", 120_000, minimum=1) or 120_000,
            request_timeout_ms=_int(opts, "requestTimeoutMs", 30_000, minimum=1) or 30_000,
        )

    def producer_config(self) -> dict[str, str]:
        return {**PRODUCER_DEFAULTS, **self.client}

    def check_batch_write(self) -> "SinkOptions":
        """A batch write (``df.write``) in exactly-once mode needs ``writeId``: the name under
        which its task partitions remember what they committed, so that re-running the job
        writes nothing twice. No stable name can be derived (a query id exists only for
        streaming queries, and a name derived from the topic would make an unrelated later
        write of the same shape skip its rows), and a silent downgrade to at-least-once would
        break the promise; so the write is refused, saying what to set. Returns ``self``."""
        if self.guarantee == EXACTLY_ONCE and not self.write_id:
            raise ValueError(
                "oncelog sink: a batch write is exactly once by default and needs the option writeId: a name "
                "for this logical write, the same when the job is re-run (e.g. .option(\"writeId\", "
                "\"orders-2026-11-23\")); a re-run with the same writeId writes nothing that was already "
                "committed. For at-least-once output, set .option(\"delivery.guarantee\", \"at_least_once\")."
            )
        return self
