"""May this producer use two-phase commit (KIP-939)? The broker's one answer, asked by the
InitProducerId handler before the transaction coordinator sees ``enable_2pc``.

Kafka asks two things, and so does oncelog:

1. the broker switch ``transaction.two.phase.commit.enable`` (off by default, as in Kafka);
2. the permission of the principal on the transactional id: the ACL operation TWO_PHASE_COMMIT
   on the TRANSACTIONAL_ID resource (besides WRITE, which every transactional producer needs),
   asked by the handler through its ACL gate (acl/rules.py, ``two_phase_commit``) and passed
   here as ``permitted``; with no authorizer configured everything is permitted, as in Kafka.
Either refusal is TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as KIP-939 specifies (not an
UNSUPPORTED_* code: the client must not retry with an older version and silently lose the
exemption from the timeout). ``keep_prepared_txn`` needs ``enable_2pc`` in the same request, so
it is covered by the same check.
"""

from __future__ import annotations


from oncelog.protocol.errors import TransactionalIdAuthorizationFailed

def check_2pc_allowed(switch_on: bool, permitted: bool, principal: str, transactional_id: str) -> None:
    """Raises TransactionalIdAuthorizationFailed unless the broker switch is on and the principal
    is ``permitted`` TWO_PHASE_COMMIT on the id."""
    if not switch_on:
        raise TransactionalIdAuthorizationFailed(
            f"transactional id {transactional_id!r}: two-phase commit is disabled on this broker "
            f"(transaction.two.phase.commit.enable=false)"
        )
    if not permitted:
        raise TransactionalIdAuthorizationFailed(
            f"transactional id {transactional_id!r}: {principal} may not use two-phase commit (TWO_PHASE_COMMIT)"
        )
