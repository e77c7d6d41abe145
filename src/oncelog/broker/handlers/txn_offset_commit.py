"""TxnOffsetCommit (28): offsets committed inside a transaction (sendOffsetsToTransaction) (R13,
R17).

The group coordinator writes them as a transactional batch of the producer into the group's
``__consumer_offsets`` partition; they stay pending — invisible to OffsetFetch and to the group —
until the transaction's COMMIT marker lands there, and vanish on ABORT. The transaction
coordinator checks first that the producer id and epoch are current and that the transaction is
Ongoing with this group's partition added (AddOffsetsToTxn); a zombie is fenced
(PRODUCER_FENCED; INVALID_PRODUCER_EPOCH before v3) and never leaves pending offsets behind. v3
carries the consumer's group metadata (KIP-447), checked like OffsetCommit's. v5 is transactions
version 2 (KIP-890 part 2): the client sends no AddOffsetsToTxn, and the group's offsets
partition joins the transaction here (``TransactionCoordinator.add_implicitly``).
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.broker.handlers._group import authorize_offsets, requested_offsets
from oncelog.broker.handlers._txn import error_code
from oncelog.protocol.messages import Builder
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import CoordinatorLoadInProgress, ErrorCode, KafkaError, ProducerFenced
from oncelog.types import TopicPartition
from oncelog.protocol.framing import Request

API_KEY = apis.TXN_OFFSET_COMMIT


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    codes, offsets = requested_offsets(broker, req.topics)
    g = _acl.gate(broker, client, API_KEY)
    if g is not None:  # ACLs (issue 18): WRITE on the transactional id, READ on the group and each topic
        authorize_offsets(g, req.group_id, codes, offsets, g.denied("transactional_id", req.transactional_id))
    try:
        groups = broker.groups
        validate_group_id(req.group_id)
        if offsets:
            # Only the current producer of an Ongoing transaction that added this group's
            # offsets partition may commit offsets in it (as it may produce, R9, R12).
            # The check runs under the offsets partition's verification guard (the group
            # coordinator's txn_commit_offsets): a marker that ends the transaction before the
            # offsets are written refuses them.
            txns = broker.transactions
            tid, pid, epoch = req.transactional_id, req.producer_id, req.producer_epoch

            async def verify() -> None:
                if request.api_version >= 5:  # transactions version 2: no AddOffsetsToTxn, the add happens here
                    await txns.add_implicitly(tid, pid, epoch, txns.offsets_partition(req.group_id),
                                              older=ProducerFenced, retriable=CoordinatorLoadInProgress)
                elif txns.serves(tid):
                    txns.verify_txn_offsets(tid, pid, epoch, req.group_id)
                else:  # cluster mode: the transaction's coordinator is another broker (broker/partitions/txn_verifier.py)
                    await txns.verify_remotely(tid, pid, epoch, txns.offsets_partition(req.group_id),
                                               retriable=CoordinatorLoadInProgress)

            errors = await groups.txn_commit_offsets(
                req.group_id, pid, epoch, getattr(req, "generation_id", -1),
                getattr(req, "member_id", ""), getattr(req, "group_instance_id", None), offsets,
                verify=verify, guarded=request.api_version < 5,
            )
            for tp, err in errors.items():
                codes[tp] = ErrorCode.none if err is None else err.code
    except KafkaError as exc:
        code = error_code(exc, API_KEY, request.api_version)
        for tp in offsets:
            codes[tp] = code
    return m.TxnOffsetCommitResponse(
        topics=tuple(
            m.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=tuple(
                    m.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=codes[TopicPartition(t.name, p.partition_index)]
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        )
    )
