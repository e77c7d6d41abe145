"""``HOST:PORT`` and ``[V6ADDR]:PORT`` -> (host, port): the one parser of an address the product
has (issue 27). No imports, so anything may use it without importing what it lives beside:

* ``parse_host_port``: the client's bootstrap servers (``client.py``, which re-exports it), the
  broker's ``--listen`` (``cli_broker.py``) and each ``NAME://HOST:PORT`` of ``listeners`` and
  ``advertised.listeners`` (``broker/network/listeners.py``). An empty host is allowed (``:9092``: every
  interface, as Kafka's listeners say).
* ``parse_listen``: the address of an HTTP side door (``metrics.listen``, ``console.listen``):
  the same, but the host must be named.

Both raise ``ValueError`` with the reason (callers in the config layer turn it into
InvalidConfig). Surrounding whitespace is ignored; the port is a number in 0..65535 (0 picks a
free one); an IPv6 address with a port is written in brackets, ``[::1]:9092`` (a bare one,
``::1:9092``, is read up to its last colon); a host never holds ``/``, ``[``, ``]`` or spaces.
"""

from __future__ import annotations

__all__ = ["parse_host_port", "parse_listen"]

_NOT_IN_A_HOST = frozenset("/[] \t")


def parse_host_port(text: str) -> tuple[str, int]:
    """``host:port``, ``:port`` or ``[v6addr]:port`` -> (host without brackets, port)."""
    value = text.strip()
    if value.startswith("["):
        host, close, rest = value[1:].partition("]")
        if not close or not rest.startswith(":"):
            raise ValueError(f"expected [V6ADDR]:PORT, got {text!r}")
        port = rest[1:]
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            raise ValueError(f"expected HOST:PORT, got {text!r}")
    if _NOT_IN_A_HOST.intersection(host):
        raise ValueError(f"host {host!r} is not a host name or address")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"port {port!r} is not a number in 0..65535")
    return host, int(port)


def parse_listen(text: str) -> tuple[str, int]:
    """``parse_host_port`` for an address to listen on that must name its host (``0.0.0.0`` for
    every interface)."""
    host, port = parse_host_port(text)
    if not host:
        raise ValueError(f"expected HOST:PORT with a host, got {text!r}")
    return host, port
