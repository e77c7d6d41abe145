"""Listeners (issue 18) as Kafka names them: ``listeners``, ``advertised.listeners`` and
``listener.security.protocol.map``.

A listener is a name, a security protocol and an address: ``PLAINTEXT://127.0.0.1:9092``,
``SASL_SSL://127.0.0.1:9093``, or a custom name mapped to a protocol
(``CLIENT://:9094`` with ``listener.security.protocol.map=CLIENT:SASL_SSL``). The four protocol
names map to themselves unless the map says otherwise, as in Kafka's default map.

Pure: ``resolve(config)`` turns the configuration into ``Listener`` values (what to bind, how to
secure it, what to advertise) and raises ``InvalidConfig`` on anything inconsistent, before a
socket is opened. When ``listeners`` is not set the broker has one PLAINTEXT listener on
``listener.host``/``listener.port`` (oncelog's older keys, ``--listen``), advertised as
``advertised.host``/``advertised.port`` say: what it always did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.hostport import parse_host_port
from oncelog.protocol.errors import InvalidConfig

if TYPE_CHECKING:
    from oncelog.broker.configuration.config import BrokerConfig

__all__ = ["PROTOCOLS", "Listener", "parse_endpoints", "parse_protocol_map", "resolve"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_ENDPOINT = re.compile(r"^([A-Za-z0-9_]+)://(.*)$")  # NAME://, then HOST:PORT (hostport.py)


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: ``name`` (upper case, as Kafka normalises it), its security ``protocol``,
    the address to bind and the address to advertise (``advertised_port`` 0: the bound port)."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_endpoints(text: str, what: str) -> list[tuple[str, str, int]]:
    """``NAME://HOST:PORT,...`` -> [(NAME, host, port)]. An empty host stays empty (bind every
    interface); ``[::1]`` loses its brackets. Raises InvalidConfig on a malformed entry or a name
    given twice."""
    out: list[tuple[str, str, int]] = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        m = _ENDPOINT.match(item)
        try:
            if m is None:
                raise ValueError("no NAME://")
            host, port = parse_host_port(m.group(2))
        except ValueError as exc:
            raise InvalidConfig(f"{what}: {item!r} is not NAME://HOST:PORT ({exc})") from None
        name = m.group(1).upper()
        if any(n == name for n, _, _ in out):
            raise InvalidConfig(f"{what}: listener name {name} appears twice")
        out.append((name, host, port))
    return out


def parse_protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` -> {NAME: PROTOCOL}, over Kafka's default (each protocol name to
    itself). Raises InvalidConfig on an unknown protocol."""
    out = {p: p for p in PROTOCOLS}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or proto not in PROTOCOLS:
            raise InvalidConfig(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL "
                                f"with PROTOCOL one of {', '.join(PROTOCOLS)}")
        out[name.strip().upper()] = proto
    return out


def resolve(config: "BrokerConfig") -> list[Listener]:
    """The broker's listeners, in the order ``listeners`` names them (the first is the one the
    cluster store registers and the ready line names). Raises InvalidConfig."""
    if config.listeners is None:
        return [Listener("PLAINTEXT", "PLAINTEXT", config.host, config.port,
                         config.advertised, config.advertised_port or 0)]
    protocols = parse_protocol_map(config.listener_security_protocol_map)
    bound = parse_endpoints(config.listeners, "listeners")
    if not bound:
        raise InvalidConfig("listeners: no listener given")
    advertised = {n: (h, p) for n, h, p in parse_endpoints(config.advertised_listeners or "", "advertised.listeners")}
    unknown = set(advertised) - {n for n, _, _ in bound}
    if unknown:
        raise InvalidConfig(f"advertised.listeners names {', '.join(sorted(unknown))}, which listeners does not")
    out = []
    for name, host, port in bound:
        if name not in protocols:
            raise InvalidConfig(f"listener {name} has no entry in listener.security.protocol.map")
        adv_host, adv_port = advertised.get(name, (host, 0))
        if not adv_host or adv_host in ("0.0.0.0", "::"):
            adv_host = config.advertised_host or "127.0.0.1"
        out.append(Listener(name, protocols[name], host or "0.0.0.0", port, adv_host, adv_port))
    return out
