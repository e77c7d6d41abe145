"""The broker's ACL service (issue 18): the authorizer (``acl/authorizer.py``, pure) plus the
durable store of its bindings, and the three ACL APIs' operations on them.

Embedded, the store is ``<data-dir>/acls.json`` (``acl/file_store.py``): a change is written
atomically before it is answered, and the authorizer's index is rebuilt at once, so the next
request on every connection sees it (nothing is cached per connection). In cluster mode the
store is the cluster's PostgreSQL database (``cluster/acls.py``): a change is committed there,
then applied here, and the other brokers apply it on the notification (or their next poll).

``AclService.for_config`` returns None when ``authorizer.class.name`` is empty: ACLs are off,
every request is allowed, and no handler does any authorization work.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Iterable, Protocol

from oncelog.acl.authorizer import Authorizer, AuthorizerSettings, parse_super_users
from oncelog.acl.file_store import AclFileStore
from oncelog.acl.model import AclBinding, AclFilter
from oncelog.broker.configuration.config import BrokerConfig

__all__ = ["AclService", "AclStore"]

log = logging.getLogger(__name__)


class AclStore(Protocol):
    def load(self) -> list[AclBinding]: ...

    def apply(self, current: frozenset[AclBinding], added: Iterable[AclBinding],
              removed: Iterable[AclBinding]) -> frozenset[AclBinding]:
        """Durably add and remove bindings; returns the whole set now stored."""
        ...


class AclService:
    def __init__(self, authorizer: Authorizer, store: AclStore) -> None:
        self.authorizer = authorizer
        self.store = store
        self._lock = asyncio.Lock()  # one change at a time: read-modify-write of the whole set

    @classmethod
    def for_config(cls, config: BrokerConfig, store: AclStore | None = None) -> "AclService | None":
        """The service when an authorizer is configured (its bindings loaded from ``store``, by
        default the data dir's file); None when ACLs are off."""
        if not config.authorizer_class_name:
            return None
        settings = AuthorizerSettings(parse_super_users(config.super_users), config.allow_everyone_if_no_acl_found)
        store = store or AclFileStore(Path(config.data_dir))
        bindings = store.load()
        log.info("authorizer %s on: %d ACL(s), super users %s, allow.everyone.if.no.acl.found=%s",
                 config.authorizer_class_name, len(bindings), sorted(settings.super_users) or "none",
                 str(settings.allow_everyone_if_no_acl_found).lower())
        return cls(Authorizer(settings, bindings), store)

    def describe(self, flt: AclFilter) -> list[AclBinding]:
        return self.authorizer.matching(flt)

    async def create(self, bindings: list[AclBinding]) -> None:
        """Add ``bindings`` (already validated; existing ones are kept once) durably."""
        async with self._lock:
            if not set(bindings) <= self.authorizer.bindings:
                await self._apply(bindings, ())
            for b in bindings:
                log.info("ACL added: %s", b)

    async def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding any filter matches, durably; per filter, what it matched."""
        async with self._lock:
            matched = [self.authorizer.matching(f) for f in filters]
            gone = {b for m in matched for b in m}
            if gone:
                await self._apply((), gone)
            for b in sorted(gone, key=str):
                log.info("ACL removed: %s", b)
            return matched

    async def _apply(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> None:
        now = await asyncio.to_thread(self.store.apply, self.authorizer.bindings, list(added), list(removed))
        self.authorizer.replace(now)

    async def refresh(self) -> None:
        """Cluster mode: reload the bindings if another broker changed them (cheap otherwise)."""
        changed = getattr(self.store, "changed", None)
        if changed is None:
            return
        async with self._lock:
            if await asyncio.to_thread(changed):
                self.authorizer.replace(await asyncio.to_thread(self.store.load))
                log.info("ACLs reloaded from the store: %d binding(s)", len(self.authorizer.bindings))
