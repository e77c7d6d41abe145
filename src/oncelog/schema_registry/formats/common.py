"""What the three formats share: references, resolved references, the JSON helpers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from oncelog.schema_registry import errors

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
KINDS = (JSON, PROTOBUF, AVRO)  # the order Confluent lists them in GET /schemas/types
#: the deepest nesting of JSON arrays and objects a schema (or a request body) may have
MAX_NESTING = 128


@dataclass(frozen=True)
class Reference:
    """One entry of a schema's ``references``: the name the schema uses (Avro: a full type
    name; JSON: the ``$ref`` URL; Protobuf: the import path), and where it is registered."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class Resolved:
    """A referenced schema, found: its name in the referring schema, kind, canonical text, and
    its own references (resolved)."""

    name: str
    kind: str
    text: str
    references: tuple["Resolved", ...] = field(default=())


class Parsed(Protocol):
    kind: str
    canonical: str

    def incompatibilities(self, writer: "Parsed") -> list[str]:
        """Why data written with ``writer`` cannot be read with this schema; [] when it can."""
        ...


def load_json(text: str) -> Any:
    """``text`` as JSON, nested at most MAX_NESTING deep. Raises RegistryError (42201)."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise errors.invalid_schema(f"nested more than {MAX_NESTING} levels deep") from None
    except ValueError as exc:
        raise errors.invalid_schema(f"not JSON: {exc}") from None
    check_nesting(doc)
    return doc


def check_nesting(doc: Any, limit: int = MAX_NESTING) -> None:
    """Raises RegistryError (42201) when ``doc`` nests arrays/objects deeper than ``limit``
    (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            raise errors.invalid_schema(f"nested more than {limit} levels deep")
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def compact(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
