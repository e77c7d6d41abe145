"""The registry's writes, decided: a request and the state -> the records to append to
``_schemas`` and the answer (``Plan``), or a RegistryError. Pure: the store appends the
records and waits until the state has applied them, then answers (store.py); a plan made from
a state that is not the latest is made again (the store holds the write lock across both).

The rules are Confluent's: a schema already live under the subject is answered with its id and
writes nothing; otherwise it is checked against the subject's live versions at the subject's
compatibility level (BACKWARD: the new schema reads the old ones' data; FORWARD: the old read
the new's; FULL: both; *_TRANSITIVE: every live version, else the latest; NONE: no check) and
gets the id its content already has anywhere, or max id + 1, and the next version number.
Soft deletes mark versions deleted; permanent deletes (of soft-deleted versions only) write
tombstones, after a watermark record when they remove the largest id.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from oncelog.schema_registry import errors, formats
from oncelog.schema_registry import records as rec
from oncelog.schema_registry.formats import AVRO, KINDS, Parsed, Reference, Resolved
from oncelog.schema_registry.records import SchemaEntry
from oncelog.schema_registry.state import LEVELS, MODES, RegistryState, check_subject, parse_version

Records = list[tuple[bytes, bytes | None]]


@dataclass
class Plan:
    records: Records
    answer: Any


@dataclass(frozen=True)
class SchemaRequest:
    """The body of a registration, lookup or compatibility check."""

    kind: str
    text: str
    references: tuple[Reference, ...]
    id: int | None = None
    version: int | None = None
    extra: tuple[tuple[str, str], ...] = ()


def schema_request(body: Any) -> SchemaRequest:
    """Reads a request body (already JSON). Raises RegistryError (422 / 42201)."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body must be a JSON object")
    text = body.get("schema")
    if not isinstance(text, str) or not text:
        raise errors.RegistryError(42201, "Invalid schema: the body must name a schema (\"schema\": string)")
    kind = body.get("schemaType") or AVRO
    if kind not in KINDS:
        raise errors.RegistryError(42201, f"Invalid schema type {kind!r}: one of {', '.join(KINDS)}")
    refs = []
    for r in body.get("references") or []:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not isinstance(r.get("subject"), str):
            raise errors.RegistryError(42201, "Invalid schema: a reference needs a name, a subject and a version")
        try:
            version = parse_version(r.get("version", -1))
        except errors.RegistryError:
            raise errors.RegistryError(42201, f"Invalid schema: reference {r['name']!r}: bad version") from None
        refs.append(Reference(r["name"], r["subject"], version))
    if len(refs) > 256:
        raise errors.RegistryError(42201, "Invalid schema: more than 256 references")
    sid, ver = body.get("id"), body.get("version")
    for name, v in (("id", sid), ("version", ver)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 2**31 - 1):
            raise errors.bad_request(f"{name} must be a non-negative integer")
    extra = tuple((k, json.dumps(body[k], separators=(",", ":"))) for k in ("metadata", "ruleSet")
                  if body.get(k) is not None)
    return SchemaRequest(kind, text, tuple(refs), sid or None, ver or None, extra)


@functools.lru_cache(maxsize=128)  # bounded: a body is up to 4 MiB
def _parsed(kind: str, text: str, refs: tuple[Resolved, ...], normalize: bool) -> Parsed:
    return formats.parse(kind, text, refs, normalize=normalize)


def parse_request(state: RegistryState, req: SchemaRequest, *, normalize: bool = False
                  ) -> tuple[Parsed, tuple[Reference, ...]]:
    """The request's schema parsed against its references, which are pinned to the versions
    found ("latest" -> a number). Raises 42201."""
    pinned = []
    for r in req.references:
        e = state.version(r.subject, r.version, deleted=True) if _exists(state, r) else None
        if e is None:
            raise errors.invalid_schema(f"reference {r.name!r}: version {r.version} of subject {r.subject!r} "
                                        "is not registered")
        pinned.append(Reference(r.name, r.subject, e.version))
    refs = tuple(pinned)
    return _parsed(req.kind, req.text, state.resolve(refs), normalize), refs


def _exists(state: RegistryState, r: Reference) -> bool:
    try:
        state.version(r.subject, r.version, deleted=True)
        return True
    except errors.RegistryError:
        return False


def parsed_entry(state: RegistryState, e: SchemaEntry) -> Parsed:
    return _parsed(e.kind, e.schema, state.resolve(e.references), False)


def incompatibilities(state: RegistryState, new: Parsed, level: str, existing: list[SchemaEntry]) -> list[str]:
    """Why ``new`` may not follow ``existing`` (oldest first) at ``level``; [] when it may."""
    if level == "NONE" or not existing:
        return []
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    out: list[str] = []
    for e in reversed(against):
        if e.kind != new.kind:
            out.append(f"{{errorType:'SCHEMA_TYPE_CHANGED', description:'version {e.version} is {e.kind}, "
                       f"the new schema {new.kind}'}}")
            continue
        old = parsed_entry(state, e)
        if level.startswith(("BACKWARD", "FULL")):
            out += [f"{m} (version {e.version})" for m in new.incompatibilities(old)]
        if level.startswith(("FORWARD", "FULL")):
            out += [f"{m} (version {e.version})" for m in old.incompatibilities(new)]
    return out


def register(state: RegistryState, subject: str, req: SchemaRequest, *, normalize: bool = False) -> Plan:
    check_subject(subject)
    mode = state.mode(subject)
    if mode in ("READONLY", "READONLY_OVERRIDE"):
        raise errors.not_permitted(f"Subject {subject} is in read-only mode")
    if req.id is not None and mode != "IMPORT":
        raise errors.not_permitted(f"Subject {subject} is not in import mode")
    parsed, refs = parse_request(state, req, normalize=normalize)
    content = (req.kind, parsed.canonical, refs)
    same = state.find(subject, content)
    if same is not None and req.id in (None, same.id):
        return Plan([], {"id": same.id, "version": same.version})
    if mode == "IMPORT":
        if req.id is None:
            raise errors.not_permitted(f"Subject {subject} is in import mode: give the schema's id")
        known = state.by_id.get(req.id)
        if known is not None and known.content != content:
            raise errors.id_mismatch(f"Overwrite new schema with id {req.id} is not permitted.")
        sid = req.id
        version = req.version or state.next_version(subject)
        if version in state.subjects.get(subject, {}):
            raise errors.not_permitted(f"Version {version} of subject {subject} already exists")
    else:
        live = [e for _, e in sorted(state.subjects.get(subject, {}).items()) if not e.deleted]
        found = incompatibilities(state, parsed, state.level(subject), live)
        if found:
            raise errors.incompatible(subject, found)
        sid = state.id_of.get(content) or state.max_id + 1
        version = state.next_version(subject)
    e = SchemaEntry(subject, version, sid, req.kind, parsed.canonical, refs, False, req.extra)
    return Plan([(rec.schema_key(subject, version), rec.schema_value(e))], {"id": sid, "version": version})


def lookup(state: RegistryState, subject: str, req: SchemaRequest, *, deleted: bool = False,
           normalize: bool = False) -> SchemaEntry:
    """POST /subjects/{subject}: the version with this schema. Raises 40401, 40403, 42201."""
    state.versions(subject, deleted=True)  # 40401
    parsed, refs = parse_request(state, req, normalize=normalize)
    e = state.find(subject, (req.kind, parsed.canonical, refs), deleted=deleted)
    if e is None:
        raise errors.schema_not_found()
    return e


def check(state: RegistryState, subject: str, version: str | None, req: SchemaRequest, *,
          normalize: bool = False) -> list[str]:
    """POST /compatibility/…: the reasons the schema is not compatible ([]: it is). Against
    one version (``version``), or at the subject's level against its versions (None)."""
    parsed, _ = parse_request(state, req, normalize=normalize)
    level = state.level(subject)
    if version is None:
        live = [e for _, e in sorted(state.subjects.get(subject, {}).items()) if not e.deleted]
        return incompatibilities(state, parsed, level, live)
    e = state.version(subject, version)
    return incompatibilities(state, parsed, "FULL" if level.startswith("FULL") else
                             "FORWARD" if level.startswith("FORWARD") else
                             "BACKWARD" if level != "NONE" else "NONE", [e])


def _watermark(state: RegistryState, removed_ids: set[int], keep: set[int]) -> Records:
    """The watermark record when a permanent delete removes the largest id ever given."""
    if state.max_id in removed_ids - keep:
        return [(rec.watermark_key(), rec.watermark_value(state.max_id))]
    return []


def delete_version(state: RegistryState, subject: str, version: str, *, permanent: bool) -> Plan:
    number = parse_version(version)
    versions = state.subjects.get(subject, {})
    if not versions:
        raise errors.subject_not_found(subject)
    if number == -1:
        pool = [e for e in versions.values() if permanent or not e.deleted]
        if not pool:
            raise errors.subject_not_found(subject)
        number = max(e.version for e in pool)
    e = versions.get(number)
    if e is None:
        raise errors.version_not_found(number)
    users = state.referenced_by(subject, number)
    if users:
        raise errors.reference_exists(f"One or more references exist to the schema {{subject={subject}, "
                                      f"version={number}}}: ids {users}")
    if not permanent:
        if e.deleted:
            raise errors.version_soft_deleted(subject, number)
        marked = SchemaEntry(e.subject, e.version, e.id, e.kind, e.schema, e.references, True, e.extra)
        return Plan([(rec.schema_key(subject, number), rec.schema_value(marked))], number)
    if not e.deleted:
        raise errors.version_not_soft_deleted(subject, number)
    others = {x.id for s, vs in state.subjects.items() for x in vs.values() if (s, x.version) != (subject, number)}
    return Plan(_watermark(state, {e.id}, others) + [(rec.schema_key(subject, number), None)], number)


def delete_subject(state: RegistryState, subject: str, *, permanent: bool) -> Plan:
    versions = state.subjects.get(subject, {})
    if not versions:
        raise errors.subject_not_found(subject)
    for v in versions:
        users = [i for i in state.referenced_by(subject, v) if i not in {e.id for e in versions.values()}]
        if users:
            raise errors.reference_exists(f"One or more references exist to the schema {{subject={subject}, "
                                          f"version={v}}}: ids {users}")
    live = [e for _, e in sorted(versions.items()) if not e.deleted]
    if not permanent:
        if not live:
            raise errors.subject_soft_deleted(subject)
        out: Records = []
        for e in live:
            marked = SchemaEntry(e.subject, e.version, e.id, e.kind, e.schema, e.references, True, e.extra)
            out.append((rec.schema_key(subject, e.version), rec.schema_value(marked)))
        return Plan(out, [e.version for e in live])
    if live:
        raise errors.subject_not_soft_deleted(subject)
    others = {x.id for s, vs in state.subjects.items() if s != subject for x in vs.values()}
    out = _watermark(state, {e.id for e in versions.values()}, others)
    out += [(rec.schema_key(subject, v), None) for v in sorted(versions)]
    if subject in state.configs:
        out.append((rec.config_key(subject), None))
    if subject in state.modes:
        out.append((rec.mode_key(subject), None))
    return Plan(out, sorted(versions))


def _level_of(body: Any) -> str:
    level = body.get("compatibility") if isinstance(body, dict) else None
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise errors.invalid_compatibility(level)
    return level.upper()


def set_config(state: RegistryState, subject: str | None, body: Any) -> Plan:
    if subject is not None:
        check_subject(subject)
    level = _level_of(body)
    return Plan([(rec.config_key(subject), rec.config_value(level))], {"compatibility": level})


def delete_config(state: RegistryState, subject: str | None) -> Plan:
    if subject is not None and subject not in state.configs:
        if subject not in state.subjects:
            raise errors.subject_not_found(subject)
        raise errors.subject_level_compatibility_not_configured(subject)
    previous = state.level(subject)
    return Plan([(rec.config_key(subject), None)], {"compatibilityLevel": previous})


def set_mode(state: RegistryState, subject: str | None, body: Any, *, force: bool = False) -> Plan:
    if subject is not None:
        check_subject(subject)
    mode = body.get("mode") if isinstance(body, dict) else None
    if not isinstance(mode, str) or mode.upper() not in MODES:
        raise errors.invalid_mode(mode)
    mode = mode.upper()
    if mode == "IMPORT" and not force:
        has = bool(state.subjects.get(subject)) if subject is not None else bool(state.subjects)
        if has:
            raise errors.not_permitted("Cannot import since found existing subjects")
    return Plan([(rec.mode_key(subject), rec.mode_value(mode))], {"mode": mode})


def delete_mode(state: RegistryState, subject: str) -> Plan:
    if subject not in state.modes:
        raise errors.subject_level_mode_not_configured(subject)
    return Plan([(rec.mode_key(subject), None)], {"mode": state.mode(subject)})
