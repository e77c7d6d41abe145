"""InitProducerId (22): a producer id and epoch for an idempotent or transactional producer.

Without a transactional.id (R5) any broker answers with a fresh producer id from the
``ProducerIdManager`` and epoch 0; like Kafka, a request that names its current id and epoch
(KIP-360, v3+) also just gets a fresh id, since nothing on the broker depends on the old one.
With a transactional.id the transaction coordinator answers (R8): it bumps the epoch, fencing
older instances, and finishes the previous instance's transaction first.

v6 (KIP-939, two-phase commit): ``enable_2pc`` exempts the id's transactions from the timeout,
``keep_prepared_txn`` keeps the previous instance's prepared transaction instead of aborting it
and answers its producer id and epoch (``ongoing_txn_producer_id/epoch``, -1 when none). Both
are first checked by ``broker/coordinators/two_phase_commit.py`` (the broker switch and the permission).
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.coordinators import two_phase_commit
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.broker.handlers._txn import error_code
from oncelog.protocol.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.INIT_PRODUCER_ID


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    enable_2pc = bool(getattr(req, "enable2_pc", False))
    keep = bool(getattr(req, "keep_prepared_txn", False))
    ongoing: dict[str, int] = {}
    g = _acl.gate(broker, client, API_KEY)
    try:
        if g is not None:
            _authorize(g, req.transactional_id)  # before anything: a refused id fences nobody
        if req.transactional_id is not None:
            if enable_2pc or keep:
                permitted = g is None or g.allowed("two_phase_commit", req.transactional_id)
                two_phase_commit.check_2pc_allowed(broker.config.transaction_two_phase_commit_enable, permitted,
                                                   client.principal, req.transactional_id)
            answer = await broker.transactions.initialize(
                req.transactional_id,
                int(req.transaction_timeout.total_seconds() * 1000),
                getattr(req, "producer_id", -1),
                getattr(req, "producer_epoch", -1),
                enable_2pc=enable_2pc,
                keep_prepared=keep,
            )
            pid, epoch = answer.producer_id, answer.producer_epoch
            ongoing = {"ongoing_txn_producer_id": answer.ongoing_producer_id,  # v6+ (Builder drops them below)
                       "ongoing_txn_producer_epoch": answer.ongoing_producer_epoch}
        elif enable_2pc or keep:
            raise InvalidRequest("two-phase commit needs a transactional.id")
        else:
            pid, epoch = broker.producer_ids.next_producer_id(), 0
    except KafkaError as exc:
        return m.InitProducerIdResponse(
            error_code=error_code(exc, API_KEY, request.api_version), producer_id=-1, producer_epoch=-1
        )
    return m.InitProducerIdResponse(error_code=ErrorCode.none, producer_id=pid, producer_epoch=epoch, **ongoing)


def _authorize(g: _acl.Gate, transactional_id: str | None) -> None:
    """ACLs (issue 18, acl/rules.py): WRITE on the transactional id; without one (idempotent
    producer, Kafka 3+) IDEMPOTENT_WRITE on the cluster or WRITE on some topic, else
    CLUSTER_AUTHORIZATION_FAILED."""
    if transactional_id is not None:
        g.require("transactional_id", transactional_id)
    elif not g.allowed("idempotent") and not g.any_allowed("any_topic"):
        _acl.refuse(ErrorCode.cluster_authorization_failed, g.principal,
                    "an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic")
