"""May this producer use two-phase commit (KIP-939)? The broker's one answer, asked by the
InitProducerId handler before the transaction coordinator sees ``enable_2pc``.

Kafka asks two things, and so does oncelog:

1. the broker switch ``transaction.two.phase.commit.enable`` (off by default, as in Kafka);
2. the permission of the principal on the transactional id: in Kafka the ACL operation
   TWO_PHASE_COMMIT on the TRANSACTIONAL_ID resource (besides WRITE, which every transactional
   producer needs). oncelog has no authorizer yet; ``may_use_2pc`` is the hook the ACL work
   fills in: it returns True while no authorizer is configured (as Kafka allows every
   operation without ``authorizer.class.name``).

Either refusal is TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as KIP-939 specifies (not an
UNSUPPORTED_* code: the client must not retry with an older version and silently lose the
exemption from the timeout). ``keep_prepared_txn`` needs ``enable_2pc`` in the same request, so
it is covered by the same check.
"""

from __future__ import annotations

from typing import Callable

from oncelog.protocol.errors import TransactionalIdAuthorizationFailed

#: The principal of a client on a listener without authentication (Kafka's).
ANONYMOUS = "User:ANONYMOUS"

#: (principal, transactional id) -> allowed? The ACL work replaces this; None: no authorizer.
Authorizer = Callable[[str, str], bool]
_authorizer: Authorizer | None = None


def set_authorizer(authorizer: Authorizer | None) -> None:
    """Install (or with None remove) the check of TWO_PHASE_COMMIT on a TRANSACTIONAL_ID."""
    global _authorizer
    _authorizer = authorizer


def may_use_2pc(principal: str, transactional_id: str) -> bool:
    """Whether ``principal`` holds TWO_PHASE_COMMIT on ``transactional_id``. True while no
    authorizer is installed (``set_authorizer``)."""
    return True if _authorizer is None else bool(_authorizer(principal, transactional_id))


def check_2pc_allowed(switch_on: bool, principal: str, transactional_id: str) -> None:
    """Raises TransactionalIdAuthorizationFailed unless the broker switch is on and the principal
    may use 2PC on the id."""
    if not switch_on:
        raise TransactionalIdAuthorizationFailed(
            f"transactional id {transactional_id!r}: two-phase commit is disabled on this broker "
            f"(transaction.two.phase.commit.enable=false)"
        )
    if not may_use_2pc(principal, transactional_id):
        raise TransactionalIdAuthorizationFailed(
            f"transactional id {transactional_id!r}: {principal} may not use two-phase commit (TWO_PHASE_COMMIT)"
        )
