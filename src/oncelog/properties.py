"""Java-properties-style files (``key=value`` lines) -> dict: the one reader the product has, for
the broker's ``--config`` file (``broker/configuration/config.py``, which re-exports it) and a
client's ``--command-config`` (``client.py``). It imports only the errors, so the client reads
its file without importing the broker's configuration.
"""

from __future__ import annotations

from oncelog.protocol.errors import InvalidConfig

__all__ = ["parse_properties"]


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties-style ``key=value`` lines; ``#`` and ``!`` comments; blank lines.
    Raises InvalidConfig for any other line."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        if "=" not in line:
            raise InvalidConfig(f"not a key=value line: {line!r}")
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out
