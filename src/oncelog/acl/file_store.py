"""The ACLs of the embedded broker: one JSON file in the data directory, ``acls.json``, replaced
atomically (oncelog/atomic.py) on every change, so a crash leaves the old set or the new one and
an acknowledged CreateAcls / DeleteAcls survives a kill -9.

Format: ``{"version": 1, "acls": [[resource type, name, pattern type, principal, host,
operation, permission], ...]}`` with Kafka's codes. A file that cannot be read stops the broker
at start (``AclFileError``) rather than starting with fewer DENY rules than were written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from oncelog.acl.model import AclBinding
from oncelog.protocol.errors import KafkaError
from oncelog.atomic import write_atomically

__all__ = ["AclFileError", "AclFileStore", "FILE_NAME"]

FILE_NAME = "acls.json"


class AclFileError(Exception):
    """The ACL file exists but is not a valid ACL file (the broker must not start without it)."""


class AclFileStore:
    """Durable set of bindings in ``<data_dir>/acls.json``. Not thread-safe (the event loop)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME

    def load(self) -> list[AclBinding]:
        """The stored bindings ([] when there is no file); raises AclFileError if unreadable."""
        if not self.path.exists():
            return []
        try:
            doc = json.loads(self.path.read_text())
            if doc.get("version") != 1:
                raise ValueError(f"unknown version {doc.get('version')!r}")
            return [AclBinding.from_json(row) for row in doc["acls"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError, KafkaError) as exc:
            raise AclFileError(f"{self.path} is not a valid ACL file: {exc}") from None

    def apply(self, current: frozenset[AclBinding], added: Iterable[AclBinding],
              removed: Iterable[AclBinding]) -> frozenset[AclBinding]:
        """The set ``current`` plus ``added`` minus ``removed``, written before it is returned."""
        new = (current | frozenset(added)) - frozenset(removed)
        self.save(new)
        return new

    def changed(self) -> bool:
        """Never: this broker is the only writer of its file (the store of cluster mode says
        whether another broker changed its set)."""
        return False

    def close(self) -> None:
        """Nothing to close: the file is written whole at each change."""

    def save(self, bindings: Iterable[AclBinding]) -> None:
        rows = sorted(b.to_json() for b in bindings)  # type: ignore[type-var]
        lines = ",\n  ".join(json.dumps(r) for r in rows)
        write_atomically(self.path, ('{"version": 1, "acls": [\n  ' + lines + "\n]}\n").encode())
