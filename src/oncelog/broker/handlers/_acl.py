"""Authorized-operations bitfields (KIP-430) as Kafka computes them while no authorizer is
configured: every operation the resource type supports (Kafka's ``AclEntry.supportedOperations``),
one bit per ``AclOperation`` code. A request that does not ask for them gets ``NOT_REQUESTED``
(Integer.MIN_VALUE), as in Kafka.
"""

from __future__ import annotations

from typing import Any

NOT_REQUESTED = -2147483648

# AclOperation codes (org.apache.kafka.common.acl.AclOperation)
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12


def _bits(*codes: int) -> int:
    return sum(1 << c for c in set(codes))


TOPIC = _bits(READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS)
GROUP = _bits(READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER = _bits(CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE)


def operations(req: Any, flag: str, bits: int) -> int:
    """``bits`` when the request's boolean field ``flag`` is set, else NOT_REQUESTED."""
    return bits if getattr(req, flag, False) else NOT_REQUESTED
