"""Produce (0): append one record batch per partition, whole.

Each partition's batch is validated (header, CRC, every record: ``records.validate_produce_batch``;
every record's timestamp against the topic's message.timestamp.before/after.max.ms, KIP-937),
then handed to its partition (``Partition.append_produced``), which makes every producer-state
check: a retry of a batch already written is answered with its offsets, any other batch goes
through this handler's transaction checks (``verify``), then is appended whole as bytes, the
same on every storage engine; errors are per partition. The response is encoded straight to bytes (protocol/produce_response.py,
byte-for-byte what kio would write), since this is the broker's hottest path. acks=0 gets no response; if such a request fails, the connection is
closed instead, as Kafka does, so the producer notices. acks=1 and acks=-1 are equivalent with a
single replica: the batch is in the log (and in every in-sync replica, i.e. this one) before the
answer goes out (R2). Every partition's append is started first (each in its place in its
producer's line), the same way on every storage engine: one that completed at the call (local
files; a duplicate) is answered at once, the others are awaited together — on PostgreSQL they
share the group COMMITs, and once all are started the connection's next Produce may be handled
meanwhile (broker/pipelining.py), so a producer's requests share commit rounds.

Internal topics (``__consumer_offsets``, ``__transaction_state``) are written only by the
broker's coordinators; a client's batch for one is refused with INVALID_TOPIC_EXCEPTION, as
Kafka does (one stray record there used to stop the next start, R22).

Transactional batches (R12) must come with the request's transactional.id and go only to
partitions their transaction has added (the coordinator's ``verify_produce``, as Kafka 3.6+'s
KIP-890 verification); otherwise INVALID_TXN_STATE, and nothing is written. In cluster mode the
check is local when this broker is also the transaction's coordinator; otherwise the first batch
of the transaction on the partition is verified by the coordinator's broker
(AddPartitionsToTxn v4 verify_only, broker/partitions/txn_verifier.py).

Produce v12+ (transactions version 2, KIP-890 part 2): the client sends no AddPartitionsToTxn;
the leader asks the coordinator to add the partition before the first transactional batch of a
transaction goes in (``TransactionCoordinator.add_implicitly``; later batches find it added and
write nothing). A batch with an epoch older than the coordinator's — the previous transaction's
late write, since every TV2 end bumps the epoch — is INVALID_PRODUCER_EPOCH; a transaction being
ended, or a coordinator that cannot answer, NOT_ENOUGH_REPLICAS (the producer retries).

Produce v13 (Kafka 4.1+, KIP-516) names each topic by its id: the id is resolved to the topic
here, and an id this broker does not know gets UNKNOWN_TOPIC_ID on each of its partitions; the
answer names the topic by the same id.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from oncelog.broker.context import BrokerContext, Client, CloseConnection
from oncelog.broker import pipelining
from oncelog.broker.partitions.partition import AppendResult, Partition, await_appends
from oncelog.internal_topics import INTERNAL_TOPICS
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis, records
from oncelog.protocol.errors import (
    CorruptMessage, InvalidRequest, InvalidRequiredAcks, InvalidTopic, KafkaError, UnknownTopicId, error_for,
)
from oncelog.protocol.framing import EncodedBody, Request
from oncelog.protocol.produce_response import PartitionResult, encode_body
from oncelog.types import TopicPartition

API_KEY = apis.PRODUCE
#: Produce v12+: transactions version 2 (KIP-890 part 2), no AddPartitionsToTxn before it
TV2_PRODUCE_VERSION = 12


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    now = broker.clock.now_ms()
    acks = req.acks
    txn_id = req.transactional_id
    failed: list[str] = []
    topics: list[tuple[Any, list[PartitionResult]]] = []
    waiting: list[tuple[list[PartitionResult], int, str, int]] = []  # where each awaited append's answer goes
    appends: list[Awaitable[AppendResult]] = []  # started appends that did not complete at the call
    known = broker.replicas.topics
    metrics = broker.metrics  # issue 19: None unless metrics.listen is set
    # ACLs (issue 18, acl/rules.py): WRITE on the transactional id for the whole request, WRITE on
    # each topic for its partitions; checked once per topic, never per batch or record.
    g = _acl.gate(broker, client, API_KEY)
    request_denied = g.denied("transactional_id", txn_id) if g is not None and txn_id is not None else None
    tv2 = request.api_version >= TV2_PRODUCE_VERSION

    def verify(tp: TopicPartition, header: records.BatchHeader, part: Partition) -> Awaitable[None] | None:
        """The transaction checks of a batch that is not a retry of a written one (R12)."""
        if header.is_transactional and tv2 and txn_id is not None:
            # Transactions version 2: the leader adds the partition to the transaction (on
            # another broker's coordinator: only for the transaction's first batch here)
            # (the batch's epoch too: under TV2 an open transaction of an older epoch is the
            # previous one, whose marker is not written here yet; the coordinator answers
            # retriably until it is, rather than this batch joining it or hanging after it)
            if broker.transactions.serves(txn_id) or not part.has_open_transaction(header.producer_id,
                                                                                   header.producer_epoch):
                return broker.transactions.add_implicitly(txn_id, header.producer_id, header.producer_epoch, tp)
            return None
        if _check_transactional(broker, txn_id, tp, header, part.has_open_transaction):
            return broker.transactions.verify_remotely(txn_id, header.producer_id,  # type: ignore[arg-type]
                                                       header.producer_epoch, tp)
        return None

    for t in req.topic_data:
        results: list[PartitionResult] = []
        name, topic_id = t.name, getattr(t, "topic_id", None)
        if topic_id is not None:  # v13+ (KIP-516): the topic by its id
            meta = broker.replicas.topic_by_id(topic_id)
            name = meta.name if meta is not None else ""
        else:
            meta = known.get(name)
        denied = request_denied or (g.denied("topic", name) if g is not None and name else None)
        for p in t.partition_data:
            try:
                if not name:
                    raise UnknownTopicId(f"topic id {topic_id} is unknown")
                if denied is not None:
                    raise error_for(denied, f"{client.principal} may not write to {name}"
                                    + (f" with transactional id {txn_id}" if request_denied else ""))
                if acks not in (-1, 0, 1):
                    raise InvalidRequiredAcks(f"acks={acks} (must be -1, 0 or 1)")
                if meta is not None and (meta.internal or name in INTERNAL_TOPICS):
                    raise InvalidTopic(f"cannot append to internal topic {name}")
                part = broker.replicas.partition(name, p.index)
                if not p.records:
                    raise CorruptMessage(f"produce to {name}-{p.index} carries no record batch")
                config = part.config
                timestamps = records.TimestampRule(now, config.timestamp_before_max_ms,
                                                   config.timestamp_after_max_ms, config.log_append_time)
                if config.key_schema_validation or config.value_schema_validation:  # the schema registry's
                    header = await broker.schema_ids.validate(name, p.records, config, timestamps)
                else:
                    header = records.validate_produce_batch(
                        p.records, config.max_message_bytes, config.max_uncompressed_bytes,
                        compacted="compact" in config.cleanup_policy, timestamps=timestamps)
                if metrics is not None:  # per batch, from its header: never per record
                    metrics.produced(name, len(p.records), header.records_count)
                # the producer-state checks (a retry of a written batch answered first), then the
                # transaction checks (``verify``), then the append: all in the partition (R6)
                appended = await part.append_produced(p.records, header, now, verify, guarded=not tv2)
                if isinstance(appended, AppendResult):  # complete at once (local files; a duplicate)
                    results.append(PartitionResult(p.index, 0, appended.base_offset, appended.log_start_offset,
                                                   log_append_time=appended.log_append_time))
                    continue
                appends.append(appended)  # completes later (a group COMMIT): awaited below, with the others
                waiting.append((results, len(results), name, p.index))
                results.append(None)  # type: ignore[arg-type]  # filled below
            except records.RecordErrors as exc:
                failed.append(f"{name}-{p.index}: {exc.code.name}: {exc}")
                if metrics is not None:
                    metrics.error(API_KEY, int(exc.code))
                errs = tuple((i, f"{m} in topic partition {name}-{p.index}.") for i, m in exc.record_errors)
                results.append(PartitionResult(p.index, int(exc.code), -1, -1, str(exc), record_errors=errs))
            except KafkaError as exc:
                failed.append(f"{name}-{p.index}: {exc.code.name}: {exc}")
                if metrics is not None:
                    metrics.error(API_KEY, int(exc.code))
                results.append(PartitionResult(p.index, int(exc.code), -1, -1, str(exc)))
        topics.append((topic_id if topic_id is not None else name, results))
    if appends:
        pipelining.submitted()  # every batch has its place in its producer's line: the next request may start
        for (results, i, name, index), out in zip(waiting, await await_appends(appends)):
            if isinstance(out, KafkaError):
                failed.append(f"{name}-{index}: {out.code.name}: {out}")
                if metrics is not None:
                    metrics.error(API_KEY, int(out.code))
                results[i] = PartitionResult(index, int(out.code), -1, -1, str(out))
            else:
                results[i] = PartitionResult(index, 0, out.base_offset, out.log_start_offset,
                                             log_append_time=out.log_append_time)
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed: " + "; ".join(failed))
        return None
    return EncodedBody(encode_body(request.api_version, topics))


def _check_transactional(broker: BrokerContext, transactional_id: str | None, tp: TopicPartition,
                         h: records.BatchHeader, has_open_transaction: Callable[[int, int], bool]) -> bool:
    """A transactional batch needs the request's transactional id and a partition its Ongoing
    transaction added (the coordinator's verification); a plain batch needs no id. Returns True
    when the batch must still be verified by the coordinator on another broker (cluster mode:
    the first batch of the transaction on this partition, broker/partitions/txn_verifier.py)."""
    if h.is_transactional:
        if transactional_id is None:
            raise InvalidRequest(f"transactional batch for {tp} in a produce request without a transactional id")
        if broker.transactions.serves(transactional_id):
            broker.transactions.verify_produce(transactional_id, h.producer_id, h.producer_epoch, tp)
            return False
        return not has_open_transaction(h.producer_id, h.producer_epoch)
    if transactional_id is not None:
        raise InvalidRequest(f"non-transactional batch for {tp} in a transactional produce request")
    return False
