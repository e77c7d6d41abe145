"""Avro schemas: parsed by Apache Avro's Python library (``avro.schema``), checked by its
reader/writer compatibility check (``avro.compatibility``, Avro's own port of the Java
``SchemaCompatibility`` Confluent's registry uses).

Canonical form: the schema's JSON, compact, keys in the order given (what Confluent compares,
up to whitespace). ``normalize``: the form Avro's library writes back (named types spelled out
once, defaults kept), so equal schemas written differently get one id.

References: each referenced schema's named types are defined first, in one ``Names``, so the
schema may use them by full name (Confluent's Avro references).
"""

from __future__ import annotations

from typing import Any

from oncelog.schema_registry import errors
from oncelog.schema_registry.formats.common import AVRO, Resolved, compact, load_json


class AvroParsed:
    kind = AVRO

    def __init__(self, schema: Any, canonical: str) -> None:
        self.schema = schema
        self.canonical = canonical

    def incompatibilities(self, writer: "AvroParsed") -> list[str]:  # type: ignore[override]
        from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

        if not isinstance(writer, AvroParsed):
            return [f"{{errorType:'TYPE_MISMATCH', description:'a {writer.kind} schema cannot be read as Avro'}}"]
        try:
            result = ReaderWriterCompatibilityChecker().get_compatibility(self.schema, writer.schema)
        except RecursionError:
            return ["{errorType:'TOO_DEEP', description:'the schemas nest too deeply to compare'}"]
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        kinds = [k.value.upper() for k in result.incompatibilities] or ["INCOMPATIBLE"]
        where = sorted(result.locations) or ["/"]
        what = sorted(str(m) for m in result.messages) or [""]
        return [f"{{errorType:'{kinds[0]}', description:'The new schema cannot read data written with the old one "
                f"at {', '.join(where)}', additionalInfo:'{', '.join(what)}'}}"]


def _define(names: Any, refs: tuple[Resolved, ...], seen: set[str]) -> None:
    """Defines the named types of every reference (their own references first) in ``names``."""
    from avro.schema import make_avsc_object

    for ref in refs:
        if ref.kind != AVRO:
            raise errors.invalid_schema(f"reference {ref.name!r} is a {ref.kind} schema, not Avro")
        if ref.text in seen:
            continue
        seen.add(ref.text)
        _define(names, ref.references, seen)
        make_avsc_object(load_json(ref.text), names)


def parse(text: str, references: tuple[Resolved, ...] = (), *, normalize: bool = False) -> AvroParsed:
    from avro.errors import AvroException
    from avro.name import Names
    from avro.schema import make_avsc_object

    doc = load_json(text)
    names = Names()
    try:
        _define(names, references, set())
        schema = make_avsc_object(doc, names)
    except RecursionError:
        raise errors.invalid_schema("nested too deeply") from None
    except (AvroException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise errors.invalid_schema(str(exc) or type(exc).__name__) from None
    canonical = compact(doc)
    if normalize:
        try:
            canonical = compact(schema.to_json(Names()))
        except (AvroException, ValueError, TypeError):
            pass
    return AvroParsed(schema, canonical)
