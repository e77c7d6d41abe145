"""The three schema formats: parse (validate, canonical form) and read-compatibility.

A format module exposes ``parse(text, references, *, normalize) -> Parsed``. ``references`` are
the schemas the text names (``Resolved``: each with its own references, resolved the same way,
depth-first); the state resolves them from subjects and versions, bounded in depth and with
cycles refused (``resolve_references`` in state.py). A ``Parsed`` knows its kind, its canonical
string (what is stored, compared and returned) and ``incompatibilities(writer)``: why data
written with ``writer`` could not be read with this schema as the reader (empty: compatible).

Parsing libraries are imported when a format is first used (the `schema-registry` extra):
Avro with Apache Avro's own Python library (its ``compatibility`` module is Avro's reader/writer
check), JSON Schema with ``jsonschema``, Protobuf with ``protobuf`` descriptors and Google's
``protoc`` (``grpcio-tools``) for ``.proto`` text.
"""

from __future__ import annotations

from oncelog.schema_registry import errors
from oncelog.schema_registry.formats.common import (
    AVRO, JSON, KINDS, MAX_NESTING, PROTOBUF, Parsed, Reference, Resolved, check_nesting, compact, load_json,
)

__all__ = ["AVRO", "JSON", "KINDS", "MAX_NESTING", "PROTOBUF", "Parsed", "Reference", "Resolved", "check_nesting",
           "compact", "load_json", "parse"]


def parse(kind: str, text: str, references: tuple[Resolved, ...] = (), *, normalize: bool = False) -> Parsed:
    """Parse ``text`` of ``kind``. Raises RegistryError: 42201 for an invalid schema."""
    if kind == AVRO:
        from oncelog.schema_registry.formats import avro_format as mod
    elif kind == JSON:
        from oncelog.schema_registry.formats import json_format as mod  # type: ignore[no-redef]
    elif kind == PROTOBUF:
        from oncelog.schema_registry.formats import protobuf_format as mod  # type: ignore[no-redef]
    else:
        raise errors.invalid_schema(f"unknown schema type {kind!r}: one of {', '.join(KINDS)}")
    return mod.parse(text, references, normalize=normalize)
