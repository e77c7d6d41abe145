"""A listener's connection limits, static or set dynamically (Kafka's ``ConnectionQuotas``):
``max.connections``, ``max.connections.per.ip`` with ``max.connections.per.ip.overrides``, and
``max.connection.creation.rate``.

``refusal`` says why a new connection is refused (None: it may stay), from the listener's
connection counts; ``throttle`` waits, before a new connection is set up, until it fits the
creation rate (at most that many set up in any one second: the next ones wait, as Kafka throttles
them, and the accept loop with them, so connections queue in the backlog). ``adopt`` takes the
dynamic values (AlterConfigs on the BROKER resource, broker/configuration/dynamic_kafka_configs.py)
over the static ones, at once: connections already open stay, as in Kafka; new ones meet the new
limits. A host name among the overrides is resolved (without blocking the event loop) when the
overrides are set; until it is, and if it cannot be, its addresses get the per-address limit.

Single-threaded: the broker's event loop.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import socket
from typing import Callable

from oncelog.broker.configuration.dynamic_kafka_configs import ConnectionLimits, connection_limits

log = logging.getLogger(__name__)

UNLIMITED = 2**31 - 1


class ConnectionQuotas:
    """See the module docstring. ``static``: the listener's own configs; ``name``: its name (logs)."""

    def __init__(self, static: ConnectionLimits, name: str) -> None:
        self.static = static
        self.name = name
        self.limits = static
        #: address -> its own limit (the overrides' addresses, and their host names' once resolved)
        self._by_address: dict[str, int] = _addresses(static.per_ip_overrides)
        self._created: collections.deque[float] = collections.deque()  # set-up times in the last second
        self._resolving: asyncio.Task[None] | None = None

    def adopt(self, value: Callable[[str], str | None]) -> None:
        """The limits with the dynamic values ``value(name)`` gives over the static ones."""
        limits = connection_limits(self.static, value)
        if limits == self.limits:
            return
        log.info("listener %s: max.connections=%d, max.connections.per.ip=%d, max.connections.per.ip.overrides=%s, "
                 "max.connection.creation.rate=%d", self.name, limits.max_connections, limits.max_per_ip,
                 ",".join(f"{h}:{n}" for h, n in limits.per_ip_overrides.items()) or "(none)", limits.creation_rate)
        self.limits = limits
        self._by_address = _addresses(limits.per_ip_overrides)
        if self._resolving is not None:
            self._resolving.cancel()
            self._resolving = None
        names = {h: n for h, n in limits.per_ip_overrides.items() if not _is_address(h)}
        if names:
            try:
                self._resolving = asyncio.get_running_loop().create_task(self._resolve(limits, names))
            except RuntimeError:  # no event loop (a unit test): host names stay unresolved
                pass

    def per_ip_limit(self, ip: str) -> int:
        return self._by_address.get(ip, self.limits.max_per_ip)

    def refusal(self, ip: str, count: int, count_of_ip: int) -> str | None:
        """Why a new connection from ``ip`` is refused, with ``count`` connections open on the
        listener and ``count_of_ip`` of them from ``ip`` (None: it is not)."""
        limits = self.limits
        if count >= limits.max_connections:
            return f"max.connections={limits.max_connections} reached"
        limit = self.per_ip_limit(ip)
        if count_of_ip >= limit:
            which = "max.connections.per.ip.overrides" if ip in self._by_address else "max.connections.per.ip"
            return f"{which}={limit} reached for {ip}"
        if limits.creation_rate == 0:
            return "max.connection.creation.rate=0"
        return None

    async def throttle(self) -> None:
        """Wait until one more connection fits ``max.connection.creation.rate`` and count it."""
        rate = self.limits.creation_rate
        if rate >= UNLIMITED:
            return
        loop = asyncio.get_running_loop()
        window = self._created
        while True:
            now = loop.time()
            while window and now - window[0] >= 1.0:
                window.popleft()
            if len(window) < max(rate, 1):
                window.append(now)
                return
            await asyncio.sleep(1.0 - (now - window[0]))

    async def _resolve(self, limits: ConnectionLimits, names: dict[str, int]) -> None:
        loop = asyncio.get_running_loop()
        for host, limit in names.items():
            try:
                infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            except OSError as exc:
                log.warning("listener %s: max.connections.per.ip.overrides: cannot resolve %s (%s); its addresses "
                            "get max.connections.per.ip", self.name, host, exc)
                continue
            if self.limits is not limits:
                return  # overtaken by newer limits
            for info in infos:
                self._by_address.setdefault(str(info[4][0]), limit)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _addresses(overrides: dict[str, int]) -> dict[str, int]:
    """The overrides given as addresses (canonical text, as the accept loop sees peers)."""
    return {str(ipaddress.ip_address(h)): n for h, n in overrides.items() if _is_address(h)}
