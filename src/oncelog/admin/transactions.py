"""Seeing and repairing transactions (KIP-664), as Kafka's ``kafka-transactions.sh`` does.

``TransactionsAdmin`` talks to the cluster: ``list`` asks every broker of Metadata
(ListTransactions; each coordinates a slice of the ids) and merges, ``describe`` asks the id's
coordinator (FindCoordinator key type 1, then DescribeTransactions), ``producers`` asks each
partition's leader (DescribeProducers), ``find_hanging`` combines them, ``abort`` writes an ABORT
marker at the partition leader (WriteTxnMarkers, as an admin).

The decision of find-hanging is pure (``hanging_reason``): a partition's producer with an open
transaction hangs when no coordinator knows its producer id, when the transaction the
coordinator has for that producer is not Ongoing/PrepareCommit/PrepareAbort, does not include
the partition, or belongs to another producer id or epoch, or when it has been open longer than
the maximum transaction timeout (a coordinator would have aborted it by then). Each result
carries the reason and the arguments ``oncelog transactions abort`` takes.

An admin abort never tears a live transaction (issue 26 row 6). A marker written behind a live
transaction's coordinator aborts the records written so far while the producer goes on: its
later records on that partition start a new transaction there, its commit commits them, and
read_committed readers see the transaction without its first records. So ``abort_at`` and
``abort_producer`` (the only two ways, shared by ``oncelog transactions abort`` and the web
console) abort only what ``find_hanging`` says hangs on that partition, by the same
``hanging_reason``, and refuse anything else with ``NotHanging``. ``force=True`` (the CLI's
``--force``, never the console) still does not write a marker behind a live transaction's
back: it fences the transaction through its coordinator (``fence``: InitProducerId for its
transactional id, as a new instance of the producer would), which aborts it on EVERY partition
and bumps the epoch, so the running producer's next request and its commit fail with
PRODUCER_FENCED: the transaction is aborted whole, never torn. Only when find-hanging cannot
decide (a coordinator did not answer) does a forced abort write the bare marker, as Kafka's tool
always does.

Every result type is a frozen dataclass with ``to_json()`` (plain dicts, for ``--json``).
"""

from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError, error_for
from oncelog.protocol.messages import make

#: Kafka's transaction.max.timeout.ms default (15 minutes): what find-hanging compares ages with
DEFAULT_MAX_TXN_TIMEOUT_MS = 15 * 60 * 1000
LIVE_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})
#: the timeout a coordinator gives a two-phase-commit transactional id (KIP-939; Kafka's
#: Int.MaxValue, coordinator/transaction/log.TWO_PC_TIMEOUT_MS): its transactions never time out
TWO_PC_TIMEOUT_MS = 2_147_483_647
_RETRIABLE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                        ErrorCode.coordinator_not_available})


@dataclass(frozen=True, slots=True)
class Listing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Description:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: tuple[tuple[str, int], ...]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["partitions"] = [f"{t}-{p}" for t, p in self.partitions]
        d["two_phase_commit"] = self.two_phase_commit
        return d

    @property
    def two_phase_commit(self) -> bool:
        """The id's producer enabled 2PC (KIP-939): its transactions wait for their decision."""
        return self.timeout_ms == TWO_PC_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class Producer:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Hanging:
    producer: Producer
    reason: str
    transactional_id: str | None = None
    abort_args: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {**self.producer.to_json(), "transactional_id": self.transactional_id, "reason": self.reason,
                "abort_args": list(self.abort_args)}


class NotHanging(Exception):
    """An abort refused because the transaction is not hanging: its coordinator knows it and
    will end it (aborting it behind the coordinator's back would tear it). ``producer``: its
    open transaction on the partition; ``transactional_id``, ``timeout_ms`` and ``state``: the
    coordinator's, for ``TransactionsAdmin.fence``."""

    def __init__(self, message: str, producer: Producer, transactional_id: str, timeout_ms: int,
                 state: str = "Ongoing") -> None:
        super().__init__(message)
        self.producer = producer
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.state = state


def abort_args(p: Producer) -> tuple[str, ...]:
    """What ``oncelog transactions abort`` takes to abort ``p``'s open transaction."""
    return ("--topic", p.topic, "--partition", str(p.partition), "--start-offset", str(p.current_txn_start_offset))


def hanging_reason(p: Producer, coordinator: Description | None, now_ms: int,
                   max_timeout_ms: int = DEFAULT_MAX_TXN_TIMEOUT_MS) -> str | None:
    """Why ``p``'s open transaction on its partition hangs, or None when it does not (pure).

    ``coordinator`` is what the coordinator says of the transactional id whose producer id is
    ``p.producer_id`` (ListTransactions filtered by producer id, then DescribeTransactions), or
    None when no coordinator knows that producer id. A producer without an open transaction
    never hangs.

    A two-phase-commit transaction (KIP-939: the coordinator's timeout is TWO_PC_TIMEOUT_MS)
    waits for an external coordinator's decision for as long as it takes: its age is no reason,
    and a partition epoch *below* the coordinator's is a prepared transaction kept for a new
    producer instance (keep_prepared_txn bumps the client's epoch, not the data's)."""
    if p.current_txn_start_offset < 0:
        return None
    tp = (p.topic, p.partition)
    if coordinator is None:
        return (f"no transaction coordinator knows producer {p.producer_id}: nothing will ever write the marker "
                f"that ends its transaction at offset {p.current_txn_start_offset}")
    tid = coordinator.transactional_id
    if coordinator.producer_id != p.producer_id:
        return f"transactional id {tid!r} now has producer {coordinator.producer_id}, not {p.producer_id}"
    if coordinator.state not in LIVE_STATES:
        return (f"the coordinator's transaction of {tid!r} is {coordinator.state}, "
                f"yet producer {p.producer_id} has an open transaction on {p.topic}-{p.partition}")
    if tp not in coordinator.partitions:
        return f"the coordinator's {coordinator.state} transaction of {tid!r} does not include {p.topic}-{p.partition}"
    two_pc = coordinator.two_phase_commit
    kept = two_pc and p.producer_epoch < coordinator.producer_epoch
    if coordinator.state == "Ongoing" and coordinator.producer_epoch != p.producer_epoch and not kept:
        return (f"the coordinator's Ongoing transaction of {tid!r} has epoch {coordinator.producer_epoch}, "
                f"the partition's open transaction epoch {p.producer_epoch}")
    # a start time of 0 or less: never started (the broker answers 0 for Kafka's -1)
    started = coordinator.start_time_ms if coordinator.start_time_ms > 0 else p.last_timestamp
    if not two_pc and started >= 0 and now_ms - started > max_timeout_ms:
        return (f"open for {(now_ms - started) // 1000} s, longer than the maximum transaction timeout "
                f"{max_timeout_ms // 1000} s")
    return None


def parse_partition(text: str) -> tuple[str, int | None]:
    """``TOPIC`` or ``TOPIC-P`` -> (topic, partition or None). A trailing ``-N`` is a partition."""
    topic, sep, tail = text.rpartition("-")
    if sep and topic and tail.isdigit():
        return topic, int(tail)
    return text, None


class TransactionsAdmin:
    """Connections to the brokers of one cluster, from a bootstrap address. Not thread-safe.
    ``security``: the client properties of a TLS / SASL listener (as ``ProtocolClient``), used
    for every connection; ``client_id``: what the brokers' logs and quotas see."""

    def __init__(self, bootstrap: str, *, timeout: float = 10.0, security: dict[str, str] | None = None,
                 client_id: str = "oncelog-transactions") -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.security = security
        self.client_id = client_id
        self._boot = ProtocolClient(bootstrap, timeout=timeout, client_id=client_id, security=security)
        self._clients: dict[int, ProtocolClient] = {}
        self._md: Any = None

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._boot.close()

    def __enter__(self) -> "TransactionsAdmin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connections ------------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None, *, refresh: bool = False) -> Any:
        if topics is None and self._md is not None and not refresh:
            return self._md
        c = self._boot
        v = c.version_for(apis.METADATA)
        m = c.classes(apis.METADATA, v)
        req_topics = None if topics is None else tuple(m["MetadataRequestTopic"](topic_id=uuid.UUID(int=0), name=n)
                                                       for n in topics)
        md = c.request(apis.METADATA, make(m["MetadataRequest"], topics=req_topics, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False,
                                           include_cluster_authorized_operations=False), version=v)
        if topics is None:
            self._md = md
        return md

    def brokers(self) -> dict[int, tuple[str, int]]:
        return {b.node_id: (b.host, b.port) for b in self.metadata().brokers}

    def client(self, node_id: int, host: str | None = None, port: int | None = None) -> ProtocolClient:
        if node_id not in self._clients:
            if host is None or port is None:
                host, port = self.brokers()[node_id]
            addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            self._clients[node_id] = ProtocolClient(addr, timeout=self.timeout, client_id=self.client_id,
                                                    security=self.security)
        return self._clients[node_id]

    def _request(self, c: ProtocolClient, api_key: int, cls: str, **fields: Any) -> Any:
        v = c.version_for(api_key)
        return c.request(api_key, make(c.classes(api_key, v)[cls], **fields), version=v)

    # -- list / describe / producers ---------------------------------------------------------------

    def list(self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1,
             pattern: str | None = None) -> tuple[list[Listing], dict[int, str]]:
        """Every transaction of every broker, merged by transactional id; and node -> problem
        for the brokers whose answer is partial or missing (loading, unknown state names)."""
        out: dict[str, Listing] = {}
        problems: dict[int, str] = {}
        for node in sorted(self.brokers()):
            try:
                res = self._request(self.client(node), apis.LIST_TRANSACTIONS, "ListTransactionsRequest",
                                    state_filters=tuple(states), producer_id_filters=tuple(producer_ids),
                                    duration_filter=duration_ms, transactional_id_pattern=pattern)
            except (OSError, ConnectionError) as exc:
                problems[node] = f"unreachable: {exc}"
                continue
            if res.error_code:
                problems[node] = ErrorCode(res.error_code).name.upper()
            if res.unknown_state_filters:
                problems[node] = f"unknown state filters: {', '.join(res.unknown_state_filters)}"
            for t in res.transaction_states:
                out[t.transactional_id] = Listing(t.transactional_id, t.producer_id, t.transaction_state, node)
        return sorted(out.values(), key=lambda x: x.transactional_id), problems

    def find_coordinator(self, transactional_id: str) -> tuple[int, str, int]:
        c = self._boot
        v = c.version_for(apis.FIND_COORDINATOR)
        m = c.classes(apis.FIND_COORDINATOR, v)
        if v >= 4:
            res = c.request(apis.FIND_COORDINATOR, make(m["FindCoordinatorRequest"], key_type=1,
                                                        coordinator_keys=(transactional_id,)), version=v)
            co = res.coordinators[0]
        else:
            co = c.request(apis.FIND_COORDINATOR, make(m["FindCoordinatorRequest"], key_type=1, key=transactional_id),
                           version=v)
        if co.error_code:
            raise error_for(ErrorCode(co.error_code), f"FindCoordinator for {transactional_id!r}")
        return co.node_id, co.host, co.port

    def describe(self, transactional_id: str, *, retry_s: float = 5.0) -> Description:
        """The id's state at its coordinator. A coordinator moving or loading (retriable codes)
        is asked again for up to ``retry_s``. Raises the KafkaError the coordinator answered
        last (TransactionalIdNotFound …)."""
        deadline = time.monotonic() + retry_s
        while True:
            try:
                return self._describe_once(transactional_id)
            except KafkaError as exc:
                if exc.code not in _RETRIABLE or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def _describe_once(self, transactional_id: str) -> Description:
        node, host, port = self.find_coordinator(transactional_id)
        res = self._request(self.client(node, host, port), apis.DESCRIBE_TRANSACTIONS, "DescribeTransactionsRequest",
                            transactional_ids=(transactional_id,))
        t = res.transaction_states[0]
        if t.error_code:
            raise error_for(ErrorCode(t.error_code), f"transactional id {transactional_id!r} at node {node}")
        return Description(
            transactional_id=t.transactional_id, coordinator_id=node, state=t.transaction_state,
            producer_id=t.producer_id, producer_epoch=t.producer_epoch,
            timeout_ms=round(t.transaction_timeout.total_seconds() * 1000),
            start_time_ms=round(t.transaction_start_time.timestamp() * 1000),
            partitions=tuple((d.topic, p) for d in t.topics for p in d.partitions))

    def leaders(self, topic: str | None = None) -> dict[tuple[str, int], int]:
        """(topic, partition) -> leader node, for one topic or every topic, internal ones included
        (a transactional offset commit leaves an open transaction on ``__consumer_offsets``)."""
        md = self.metadata(None if topic is None else [topic], refresh=True)
        out = {}
        for t in md.topics:
            if t.error_code:
                raise error_for(ErrorCode(t.error_code), f"topic {t.name}")
            for p in t.partitions:
                out[(t.name, p.partition_index)] = p.leader_id
        return out

    def producers(self, topic: str | None = None, partition: int | None = None) -> tuple[list[Producer], dict[str, str]]:
        """The producers of each partition (of ``topic``, or of every topic), asked of its
        leader; and "topic-partition" -> error for partitions that could not be described."""
        leaders = self.leaders(topic)
        if partition is not None:
            leaders = {tp: n for tp, n in leaders.items() if tp[1] == partition}
            if not leaders:
                raise error_for(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition}")
        by_node: dict[int, dict[str, list[int]]] = {}
        for (t, p), node in sorted(leaders.items()):
            by_node.setdefault(node, {}).setdefault(t, []).append(p)
        out: list[Producer] = []
        errors: dict[str, str] = {}
        for node, topics in by_node.items():
            if node < 0:
                for t, ps in topics.items():
                    errors.update({f"{t}-{p}": "LEADER_NOT_AVAILABLE" for p in ps})
                continue
            c = self.client(node)
            m = c.classes(apis.DESCRIBE_PRODUCERS)
            res = self._request(c, apis.DESCRIBE_PRODUCERS, "DescribeProducersRequest", topics=tuple(
                m["TopicRequest"](name=t, partition_indexes=tuple(ps)) for t, ps in topics.items()))
            for t in res.topics:
                for p in t.partitions:
                    if p.error_code:
                        errors[f"{t.name}-{p.partition_index}"] = ErrorCode(p.error_code).name.upper()
                        continue
                    out.extend(Producer(t.name, p.partition_index, s.producer_id, s.producer_epoch, s.last_sequence,
                                        s.last_timestamp, s.coordinator_epoch, s.current_txn_start_offset)
                               for s in p.active_producers)
        return out, errors

    # -- find-hanging / abort ------------------------------------------------------------------------

    def find_hanging(self, now_ms: int, *, topic: str | None = None, partition: int | None = None,
                     max_timeout_ms: int = DEFAULT_MAX_TXN_TIMEOUT_MS) -> tuple[list[Hanging], dict[str, str]]:
        """Open transactions on partitions that no coordinator will finish (``hanging_reason``);
        and "topic-partition" -> error for partitions whose producers could not be read.

        Raises CoordinatorNotAvailable when some broker could not list its transactions (loading,
        unreachable) or a coordinator could not describe one: then "no coordinator knows this
        producer" cannot be told apart from "its coordinator did not answer", and a hanging
        verdict might abort a live transaction."""
        verdicts, errors = self._judge(now_ms, topic, partition, max_timeout_ms)
        found = [Hanging(p, reason, d.transactional_id if d else None, abort_args(p))
                 for p, d, reason in verdicts if reason is not None]
        return self._still_open(found, topic, partition), errors

    def _judge(self, now_ms: int, topic: str | None, partition: int | None, max_timeout_ms: int
               ) -> tuple[list[tuple[Producer, Description | None, str | None]], dict[str, str]]:
        """Every open transaction on the partitions asked for, with what its coordinator says of
        it (None: no coordinator knows its producer id) and why it hangs (None: it does not,
        ``hanging_reason``); and the partitions whose producers could not be read. Raises as
        ``find_hanging``."""
        producers, errors = self.producers(topic, partition)
        open_txns = [p for p in producers if p.current_txn_start_offset >= 0]
        if not open_txns:
            return [], errors
        listed, problems = self.list(producer_ids=sorted({p.producer_id for p in open_txns}))
        if problems:
            raise error_for(ErrorCode.coordinator_not_available, "cannot tell which producers the coordinators "
                            "know: " + "; ".join(f"broker {n}: {why}" for n, why in sorted(problems.items())))
        by_pid: dict[int, Description] = {}
        for li in listed:
            try:
                d = self.describe(li.transactional_id)
            except KafkaError as exc:
                if exc.code == ErrorCode.transactional_id_not_found:
                    continue  # expired between the two requests: unknown
                raise error_for(exc.code, f"cannot describe {li.transactional_id!r}: {exc}") from None
            by_pid[li.producer_id] = d
        return [(p, by_pid.get(p.producer_id), hanging_reason(p, by_pid.get(p.producer_id), now_ms, max_timeout_ms))
                for p in open_txns], errors

    def _still_open(self, found: list[Hanging], topic: str | None, partition: int | None) -> list[Hanging]:
        """Only those whose transaction is still open at the same start offset after the
        coordinators were asked (one that a coordinator finished meanwhile is dropped)."""
        if not found:
            return found
        again, _ = self.producers(topic, partition)
        now_open = {(p.topic, p.partition, p.producer_id, p.current_txn_start_offset) for p in again}
        return [h for h in found
                if (h.producer.topic, h.producer.partition, h.producer.producer_id,
                    h.producer.current_txn_start_offset) in now_open]

    def producer_at(self, topic: str, partition: int, start_offset: int) -> Producer:
        """The producer whose open transaction on ``topic-partition`` starts at ``start_offset``
        (as Kafka's abort looks it up). Raises LookupError when there is none."""
        producers, errors = self.producers(topic, partition)
        if errors:
            raise error_for(ErrorCode[next(iter(errors.values())).lower()], f"{topic}-{partition}")
        for p in producers:
            if p.current_txn_start_offset == start_offset:
                return p
        raise LookupError(f"no open transaction starts at offset {start_offset} on {topic}-{partition}")

    def hanging_at(self, topic: str, partition: int, now_ms: int, *, max_timeout_ms: int = DEFAULT_MAX_TXN_TIMEOUT_MS,
                   start_offset: int | None = None, producer_id: int | None = None) -> Hanging:
        """The hanging transaction on ``topic-partition`` that starts at ``start_offset`` (or
        belongs to ``producer_id``), by ``find_hanging``'s definition and from the same answers
        (``_judge``). Raises LookupError when no open transaction is there (or it ended while
        the coordinators were asked), NotHanging when there is one but it is not hanging (with
        why), or the KafkaError that kept find-hanging from deciding."""
        verdicts, errors = self._judge(now_ms, topic, partition, max_timeout_ms)
        if errors:
            raise error_for(ErrorCode[next(iter(errors.values())).lower()], f"{topic}-{partition}")
        mine = [(p, d, reason) for p, d, reason in verdicts
                if (start_offset is None or p.current_txn_start_offset == start_offset)
                and (producer_id is None or p.producer_id == producer_id)]
        where = f"starts at offset {start_offset}" if start_offset is not None else f"is of producer {producer_id}"
        if not mine:
            raise LookupError(f"no open transaction {where} on {topic}-{partition}")
        p, d, reason = mine[0]
        if reason is None:
            assert d is not None  # hanging_reason: an open transaction no coordinator knows hangs
            raise NotHanging(f"the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) on "
                             f"{topic}-{partition} starting at offset {p.current_txn_start_offset} is not hanging: its "
                             f"coordinator knows it and will end it (commit or abort, or abort it on timeout), and it "
                             f"has not been open longer than the maximum transaction timeout {max_timeout_ms // 1000} "
                             f"s. Aborting it here would tear it (its producer's commit would commit only its later "
                             f"records)", p, d.transactional_id, d.timeout_ms, d.state)
        still = self._still_open([Hanging(p, reason, d.transactional_id if d else None, abort_args(p))],
                                 topic, partition)
        if not still:
            raise LookupError(f"no open transaction {where} on {topic}-{partition}: it ended meanwhile")
        return still[0]

    def fence(self, transactional_id: str, timeout_ms: int, *, retry_s: float = 30.0) -> tuple[int, int]:
        """Abort ``transactional_id``'s open transaction WHOLE through its coordinator and fence
        its producer: InitProducerId for the id (``timeout_ms``: its transaction timeout, kept),
        as a new instance of the producer would. The coordinator aborts the transaction on every
        partition and bumps the epoch; the running producer's next request and its commit fail
        with PRODUCER_FENCED. Retries while the coordinator finishes the abort
        (CONCURRENT_TRANSACTIONS) or moves, for up to ``retry_s``. Returns the new (producer
        id, epoch), which nobody holds. Raises the KafkaError the coordinator answered last."""
        deadline = time.monotonic() + retry_s
        retriable = _RETRIABLE | {ErrorCode.concurrent_transactions}
        while True:
            try:
                node, host, port = self.find_coordinator(transactional_id)
                res = self._request(self.client(node, host, port), apis.INIT_PRODUCER_ID, "InitProducerIdRequest",
                                    transactional_id=transactional_id, producer_id=-1, producer_epoch=-1,
                                    transaction_timeout=datetime.timedelta(milliseconds=max(timeout_ms, 1)))
                if not res.error_code:
                    return res.producer_id, res.producer_epoch
                exc = error_for(ErrorCode(res.error_code), f"fencing transactional id {transactional_id!r}")
            except KafkaError as e:
                exc = e
            if exc.code not in retriable or time.monotonic() > deadline:
                raise exc
            time.sleep(0.2)

    def abort_at(self, topic: str, partition: int, start_offset: int, *, now_ms: int | None = None,
                 max_timeout_ms: int = DEFAULT_MAX_TXN_TIMEOUT_MS, force: bool = False) -> Producer:
        """Abort the HANGING transaction that starts at ``start_offset`` on ``topic-partition``
        (``hanging_at``: find-hanging's definition, with ``max_timeout_ms`` and the wall clock
        ``now_ms``), as Kafka's ``abort --start-offset`` looks it up, then write the ABORT
        marker (``abort``). Returns the producer whose transaction was aborted. Raises
        LookupError when no open transaction starts there, NotHanging when it is live, or the
        KafkaError the leader answered. ``force`` (the CLI's ``--force``): a live transaction is
        fenced whole through its coordinator (``fence``: aborted on every partition, its
        producer fenced), and when find-hanging cannot decide, the bare marker is written.
        ``oncelog transactions abort --start-offset`` and the web console's abort button (never
        forced) both call this."""
        p, fenced = self._checked(topic, partition, now_ms, max_timeout_ms, force, start_offset=start_offset)
        if p is None:  # forced, and find-hanging could not decide: the bare marker, as Kafka's tool
            p = self.producer_at(topic, partition, start_offset)
        if not fenced:
            self.abort(topic, partition, p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0))
        return p

    def abort_producer(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                       coordinator_epoch: int, *, now_ms: int | None = None,
                       max_timeout_ms: int = DEFAULT_MAX_TXN_TIMEOUT_MS, force: bool = False) -> None:
        """``abort`` with the producer named (the CLI's ``--producer-id``), after the same check
        as ``abort_at``: the producer's open transaction there must be hanging; with ``force``, a
        live one is fenced whole through its coordinator instead (``fence``)."""
        _, fenced = self._checked(topic, partition, now_ms, max_timeout_ms, force, producer_id=producer_id)
        if not fenced:
            self.abort(topic, partition, producer_id, producer_epoch, coordinator_epoch)

    def _checked(self, topic: str, partition: int, now_ms: int | None, max_timeout_ms: int, force: bool, *,
                 start_offset: int | None = None, producer_id: int | None = None) -> tuple[Producer | None, bool]:
        """The check both aborts make before a marker (``hanging_at``, at ``now_ms`` or the wall
        clock): (the hanging transaction's producer, False) when the marker may be written;
        with ``force``, (the live transaction's producer, True) once it was fenced whole
        through its coordinator (no marker to write), or (None, False) when find-hanging could
        not decide; a transaction whose coordinator is committing it (PrepareCommit) raises
        InvalidTxnState even then. Without ``force`` it raises what ``hanging_at`` raises."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        try:
            return self.hanging_at(topic, partition, now, max_timeout_ms=max_timeout_ms, start_offset=start_offset,
                                   producer_id=producer_id).producer, False
        except NotHanging as exc:
            if not force:
                raise
            if exc.state == "PrepareCommit":  # decided: fencing would wait for the commit, then say "aborted"
                raise error_for(ErrorCode.invalid_txn_state, f"the transaction of {exc.transactional_id!r} is "
                                "committing (PrepareCommit): its coordinator decided to commit it, and its markers "
                                "are being written; nothing can abort it") from None
            self.fence(exc.transactional_id, exc.timeout_ms)
            return exc.producer, True
        except KafkaError:
            if not force:
                raise
            return None, False

    def abort(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
              coordinator_epoch: int) -> None:
        """Write an ABORT marker for the producer's open transaction at the partition's leader
        (idempotent: nothing is written when the producer has no open transaction there).
        Raises the KafkaError the leader answered. UNCHECKED: it may tear a live transaction;
        the tools call it only through ``abort_at`` / ``abort_producer``."""
        leader = self.leaders(topic).get((topic, partition))
        if leader is None or leader < 0:
            raise error_for(ErrorCode.leader_not_available, f"{topic}-{partition}")
        c = self.client(leader)
        m = c.classes(apis.WRITE_TXN_MARKERS)
        res = self._request(c, apis.WRITE_TXN_MARKERS, "WriteTxnMarkersRequest", markers=(m["WritableTxnMarker"](
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            coordinator_epoch=coordinator_epoch,
            topics=(m["WritableTxnMarkerTopic"](name=topic, partition_indexes=(partition,)),)),))
        code = res.markers[0].topics[0].partitions[0].error_code
        if code:
            raise error_for(ErrorCode(code), f"abort of producer {producer_id} epoch {producer_epoch} on "
                                             f"{topic}-{partition} (coordinator epoch {coordinator_epoch})")
