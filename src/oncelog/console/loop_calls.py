"""The console's calls into the broker, each one turn (or a few) of the event loop, made from
an HTTP worker thread (``run_coroutine_threadsafe``, at most ``CALL_TIMEOUT_S``): the event loop
owns every piece of broker state, so nothing here reads it from the HTTP thread.

* ``LoopReader``: one partition read the way Fetch reads it (``partition_read.py`` in the
  broker's observability part), the message browser's and timeline's ``PartitionReader``;
* ``credential``: a user's SCRAM credential (the one SASL/PLAIN checks against), for a login;
* ``decide``: the broker authorizer's decisions for one principal over many names, a chunk of
  ``DECISIONS_PER_TURN`` per turn of the loop.

Errors: a partition's KafkaError (unknown, led by another broker, a storage error) comes back
as it is; a loop that does not answer in time raises TimeoutError.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Coroutine, Iterable, Protocol, TypeVar

from oncelog.acl.model import CLUSTER_NAME, AclOperation, ResourceType
from oncelog.broker.observability import partition_read
from oncelog.broker.observability.partition_read import TxnFacts, Window
from oncelog.broker.observability.observed import ObservedBroker
from oncelog.console.access import Decisions

if TYPE_CHECKING:
    from oncelog.broker.auth.acls import AclService
    from oncelog.broker.membership import CredentialService


class ConsoleBroker(ObservedBroker, Protocol):
    """What the console reads of the broker: what observability reads, and its users and ACLs
    (the login and what each principal may see)."""

    users: "CredentialService"
    acls: "AclService | None"


__all__ = ["LoopReader", "acls_on", "credential", "decide", "may"]

CALL_TIMEOUT_S = 5.0
DECISIONS_PER_TURN = 512
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_T = TypeVar("_T")


def call(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, _T], timeout: float = CALL_TIMEOUT_S) -> _T:
    """Run ``coro`` on the broker's loop and wait for it (from another thread)."""
    if loop.is_closed():
        coro.close()
        raise RuntimeError("the broker is stopping")
    fut = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return fut.result(timeout)
    except TimeoutError:
        fut.cancel()
        raise


class LoopReader:
    """``messages.PartitionReader`` over the broker's own partition read (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, broker: "ConsoleBroker", topic: str, partition: int) -> None:
        self.loop, self.broker, self.topic, self.partition = loop, broker, topic, partition

    def window(self, offset: int, max_bytes: int, read_committed: bool) -> Window:
        return call(self.loop, partition_read.read_window(self.broker, self.topic, self.partition, offset, max_bytes,
                                                          read_committed=read_committed))

    def facts(self, first: int, last: int, producer_ids: frozenset[int]) -> TxnFacts:
        return call(self.loop, partition_read.txn_facts(self.broker, self.topic, self.partition, first, last,
                                                        producer_ids))

    def offset_for_timestamp(self, ts_ms: int) -> int:
        return call(self.loop, partition_read.offset_for_timestamp(self.broker, self.topic, self.partition, ts_ms))


def acls_on(broker: "ConsoleBroker") -> bool:
    """Whether the broker has an authorizer (then the console needs a login)."""
    return bool(broker.config.authorizer_class_name)


def credential(loop: asyncio.AbstractEventLoop, broker: "ConsoleBroker", user: str) -> tuple[bytes, int, bytes, str] | None:
    """``user``'s strongest SCRAM credential as (salt, iterations, stored key, hash name), or None."""
    async def get() -> tuple[bytes, int, bytes, str] | None:
        creds = broker.users.store.any_of(user)
        if not creds:
            return None
        c = creds[0]
        return c.salt, c.iterations, c.stored_key, _HASHES[c.mechanism]
    return call(loop, get())


def may(loop: asyncio.AbstractEventLoop, broker: "ConsoleBroker", principal: str, host: str, op: AclOperation,
        rtype: ResourceType, name: str) -> bool:
    """One authorizer decision (True when there is no authorizer)."""
    async def check() -> bool:
        acls = broker.acls
        return acls is None or acls.authorizer.authorize(principal, host, op, rtype, name)
    return call(loop, check())


def decide(loop: asyncio.AbstractEventLoop, broker: "ConsoleBroker", principal: str, host: str, topics: Iterable[str],
           groups: Iterable[str], transactional_ids: Iterable[str]) -> Decisions:
    """What ``principal`` from ``host`` may describe among the names given."""
    wanted = [(ResourceType.TOPIC, sorted(set(topics))), (ResourceType.GROUP, sorted(set(groups))),
              (ResourceType.TRANSACTIONAL_ID, sorted(set(transactional_ids)))]

    async def run() -> Decisions:
        acls = broker.acls
        if acls is None:
            return Decisions(everything=True)
        auth = acls.authorizer
        allowed: list[frozenset[str]] = []
        n = 0
        for rtype, names in wanted:
            ok = []
            for name in names:
                n += 1
                if n % DECISIONS_PER_TURN == 0:
                    await asyncio.sleep(0)
                    auth = acls.authorizer
                if auth.authorize(principal, host, AclOperation.DESCRIBE, rtype, name):
                    ok.append(name)
            allowed.append(frozenset(ok))
        cluster = auth.authorize(principal, host, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
        return Decisions(allowed[0], allowed[1], allowed[2], cluster)
    return call(loop, run())
