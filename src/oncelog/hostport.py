"""``parse_host_port``: ``HOST:PORT`` or ``[V6ADDR]:PORT`` -> (host, port). No imports, so the
broker's command line can use it without importing the protocol client (``client.py``, which
re-exports it)."""

from __future__ import annotations

__all__ = ["parse_host_port"]


def parse_host_port(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6addr]:port``."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest.lstrip(":"))
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)
