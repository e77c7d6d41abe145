"""The records of the ``_schemas`` topic, in Confluent's own format (its ``KafkaStore``), so the
topic means the same to oncelog and to Confluent's tools.

Keys and values are JSON. Keys are written with their fields in one fixed order (compaction
compares key bytes: one subject/version is always one key)::

    {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}
        -> {"subject":S,"version":V,"id":ID,["schemaType":T,]["references":[...],]"schema":TEXT,"deleted":B}
    {"keytype":"CONFIG","subject":S|null,"magic":0}   -> {"compatibilityLevel":LEVEL} | null (removed)
    {"keytype":"MODE","subject":S|null,"magic":0}     -> {"mode":MODE} | null (removed)
    {"keytype":"ONCELOG_ID_WATERMARK","magic":0}      -> {"id":ID}

A SCHEMA key with a null value (tombstone) is a permanently deleted version. The watermark is
oncelog's: written before a permanent delete, it keeps the highest id ever given, so ids are
never reused after the records that held them are compacted away. Other key types
(Confluent's NOOP, DELETE_SUBJECT, CLEAR_SUBJECT, CONTEXT …) are read and skipped, and so is
a record that is not such JSON (the topic is a plain topic: anyone with WRITE on it can write).
Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from oncelog.schema_registry.formats import AVRO, KINDS, Reference

SCHEMA, CONFIG, MODE, WATERMARK = "SCHEMA", "CONFIG", "MODE", "ONCELOG_ID_WATERMARK"


@dataclass(frozen=True)
class SchemaEntry:
    """One version of a subject."""

    subject: str
    version: int
    id: int
    kind: str
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False
    extra: tuple[tuple[str, str], ...] = field(default=())  # metadata / ruleSet as given (JSON text)

    @property
    def content(self) -> tuple[str, str, tuple[Reference, ...]]:
        """What makes two versions the same schema (one id)."""
        return (self.kind, self.schema, self.references)


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dump({"keytype": SCHEMA, "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return _dump({"keytype": CONFIG, "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    return _dump({"keytype": MODE, "subject": subject, "magic": 0})


def watermark_key() -> bytes:
    return _dump({"keytype": WATERMARK, "magic": 0})


def schema_value(e: SchemaEntry) -> bytes:
    doc: dict[str, Any] = {"subject": e.subject, "version": e.version, "id": e.id}
    if e.kind != AVRO:
        doc["schemaType"] = e.kind
    if e.references:
        doc["references"] = [r.to_json() for r in e.references]
    for k, v in e.extra:
        doc[k] = json.loads(v)
    doc["schema"] = e.schema
    doc["deleted"] = e.deleted
    return _dump(doc)


def config_value(level: str) -> bytes:
    return _dump({"compatibilityLevel": level})


def mode_value(mode: str) -> bytes:
    return _dump({"mode": mode})


def watermark_value(schema_id: int) -> bytes:
    return _dump({"id": schema_id})


@dataclass(frozen=True)
class Decoded:
    """A record of the topic, read: its key type, subject (None: global), version, and the
    value's document (None: a tombstone)."""

    keytype: str
    subject: str | None
    version: int | None
    value: dict[str, Any] | None


def decode(key: bytes | None, value: bytes | None) -> Decoded | None:
    """One record; None for a record that is not the registry's (skipped)."""
    if key is None:
        return None
    try:
        k = json.loads(key)
        v = json.loads(value) if value is not None else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(k, dict) or not isinstance(k.get("keytype"), str):
        return None
    if v is not None and not isinstance(v, dict):
        return None
    subject = k.get("subject")
    version = k.get("version")
    if subject is not None and not isinstance(subject, str):
        return None
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        return None
    return Decoded(k["keytype"], subject, version, v)


def entry_of(d: Decoded) -> SchemaEntry | None:
    """The SchemaEntry of a SCHEMA record with a value, or None when it is malformed."""
    v = d.value
    if v is None or d.subject is None or d.version is None:
        return None
    schema, sid = v.get("schema"), v.get("id")
    kind = v.get("schemaType") or AVRO
    if not isinstance(schema, str) or not isinstance(sid, int) or isinstance(sid, bool) or kind not in KINDS:
        return None
    refs = []
    for r in v.get("references") or []:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not isinstance(r.get("subject"), str) \
                or not isinstance(r.get("version"), int):
            return None
        refs.append(Reference(r["name"], r["subject"], r["version"]))
    extra = tuple((k, json.dumps(v[k], separators=(",", ":"))) for k in ("metadata", "ruleSet") if v.get(k) is not None)
    return SchemaEntry(d.subject, d.version, sid, kind, schema, tuple(refs), bool(v.get("deleted", False)), extra)
