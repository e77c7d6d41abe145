"""DescribeUserScramCredentials (50, issue 18): each user's SCRAM mechanisms and iteration
counts (never a salt or key), from the broker's credentials (the data dir's file, or in cluster mode the store's table as
last refreshed, about every second).
No users named (null): every user with a credential. Per-user errors as Kafka's:
RESOURCE_NOT_FOUND for a user without credentials, DUPLICATE_RESOURCE for a user named twice."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import Builder
from oncelog.protocol.framing import Request

API_KEY = apis.DESCRIBE_USER_SCRAM_CREDENTIALS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    _acl.check(_acl.gate(broker, client, API_KEY), "cluster")  # issue 18: DESCRIBE on the cluster
    m = Builder(API_KEY, request.api_version)
    users = request.body.users
    names = None if users is None else [u.name for u in users]
    if names == []:
        names = None  # Kafka: an empty list describes every user too
    rows = broker.users.store.describe(names)
    return m.DescribeUserScramCredentialsResponse(
        error_code=ErrorCode.none, error_message=None,
        results=tuple(m.DescribeUserScramCredentialsResult(
            user=user, error_code=code, error_message=msg,
            credential_infos=tuple(m.CredentialInfo(mechanism=mech, iterations=it) for mech, it in infos))
            for user, code, msg, infos in rows),
    )
