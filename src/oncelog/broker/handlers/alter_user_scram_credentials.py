"""AlterUserScramCredentials (51, issue 18): add, replace or delete users' SCRAM credentials.

An upsertion carries the salt, the iteration count and the salted password (the client salts
and hashes: the password itself never travels); the broker derives the stored and server keys,
drops the salted password, and keeps the result durably before it answers (embedded: the data
dir's file, broker/auth/credentials.py; cluster mode: the store, broker/membership/cluster_credentials.py). Per-user results with Kafka's codes: UNACCEPTABLE_CREDENTIAL (empty name, iterations
outside 4096..16384), UNSUPPORTED_SASL_MECHANISM, RESOURCE_NOT_FOUND (deleting what does not
exist), DUPLICATE_RESOURCE (a user and mechanism altered twice in one request). A change applies
to the next authentication at once; connections already authenticated stay so (as in Kafka)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.messages import Builder
from oncelog.protocol.framing import Request

API_KEY = apis.ALTER_USER_SCRAM_CREDENTIALS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    m = Builder(API_KEY, request.api_version)
    req = request.body
    g = _acl.gate(broker, client, API_KEY)
    denied = None if g is None else g.denied("cluster")  # issue 18: ALTER on the cluster
    if denied is not None:  # as Kafka: every user of the request answers the refusal
        users = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
        return m.AlterUserScramCredentialsResponse(results=tuple(
            m.AlterUserScramCredentialsResult(user=user, error_code=denied, error_message=None) for user in users))
    results = await broker.users.apply(
        [(d.name, int(d.mechanism)) for d in req.deletions],
        [(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password)) for u in req.upsertions],
    )
    return m.AlterUserScramCredentialsResponse(
        results=tuple(m.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=msg)
                      for user, (code, msg) in results.items()))
