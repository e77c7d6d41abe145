"""The REST API: (method, path, query, body, who) -> (status, JSON answer), over the store.

Confluent's resources (its API reference; what confluent-kafka's ``SchemaRegistryClient`` and
the other serializers call):

    GET  /  /schemas/types  /schemas/ids/{id}[/schema|/subjects|/versions]
    GET  /subjects  /subjects/{s}/versions  /subjects/{s}/versions/{v}[/schema|/referencedby]
    POST /subjects/{s}/versions (register)  /subjects/{s} (lookup)
    DELETE /subjects/{s}[?permanent=true]  /subjects/{s}/versions/{v}[?permanent=true]
    POST /compatibility/subjects/{s}/versions[/{v}]
    GET|PUT|DELETE /config[/{s}]   GET|PUT|DELETE /mode[/{s}]

Each route names the operation it needs (``Need``: Confluent's Schema Registry operation and
its subject); ``auth.Guard`` decides (auth.py). Subjects in paths are URL-decoded once.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable

from oncelog.schema_registry import errors, formats, planner
from oncelog.schema_registry.formats import AVRO, KINDS, PROTOBUF
from oncelog.schema_registry.records import SchemaEntry
from oncelog.schema_registry.state import RegistryState, check_subject
from oncelog.schema_registry.store import SchemaStore

# Confluent's Schema Registry operations (its security plugin's names)
SUBJECT_READ, SUBJECT_WRITE, SUBJECT_DELETE = "SUBJECT_READ", "SUBJECT_WRITE", "SUBJECT_DELETE"
SCHEMA_READ = "SCHEMA_READ"
SUBJECT_COMPATIBILITY_READ, SUBJECT_COMPATIBILITY_WRITE = "SUBJECT_COMPATIBILITY_READ", "SUBJECT_COMPATIBILITY_WRITE"
GLOBAL_COMPATIBILITY_READ, GLOBAL_COMPATIBILITY_WRITE = "GLOBAL_COMPATIBILITY_READ", "GLOBAL_COMPATIBILITY_WRITE"
GLOBAL_READ = "GLOBAL_READ"


@dataclass
class Call:
    """One request as the routes see it."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    guard: Any  # auth.Guard: require(operation, subject) / may(operation, subject)

    def flag(self, name: str) -> bool:
        return self.query.get(name, "").lower() == "true"


def _entry_json(e: SchemaEntry) -> dict[str, Any]:
    doc: dict[str, Any] = {"subject": e.subject, "version": e.version, "id": e.id}
    doc.update(_schema_json(e))
    if e.deleted:
        doc["deleted"] = True
    return doc


def _schema_json(e: SchemaEntry) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if e.kind != AVRO:
        doc["schemaType"] = e.kind
    if e.references:
        doc["references"] = [r.to_json() for r in e.references]
    doc["schema"] = e.schema
    return doc


def _formatted(doc: dict[str, Any], e: SchemaEntry, refs: Any, fmt: str | None) -> dict[str, Any]:
    """``format=serialized``: a Protobuf schema as its base64 descriptor. Done outside the state
    lock (it may run protoc); ``refs``: the entry's references, resolved under the lock."""
    if fmt == "serialized" and e.kind == PROTOBUF:
        from oncelog.schema_registry.formats.protobuf_format import serialized

        doc["schema"] = serialized(e.schema, refs)
    return doc


def _int(text: str) -> int:
    if not re.fullmatch(r"-?\d{1,10}", text):
        raise errors.schema_not_found()
    return int(text)


class RegistryApi:
    def __init__(self, store: SchemaStore) -> None:
        self.store = store
        self.routes: list[tuple[str, re.Pattern[str], Callable[..., tuple[int, Any]]]] = [
            ("GET", re.compile(r"/"), self.root),
            ("GET", re.compile(r"/schemas/types"), self.types),
            ("GET", re.compile(r"/schemas/ids/([^/]+)"), self.schema_by_id),
            ("GET", re.compile(r"/schemas/ids/([^/]+)/schema"), self.raw_by_id),
            ("GET", re.compile(r"/schemas/ids/([^/]+)/subjects"), self.subjects_of_id),
            ("GET", re.compile(r"/schemas/ids/([^/]+)/versions"), self.versions_of_id),
            ("GET", re.compile(r"/subjects"), self.subjects),
            ("GET", re.compile(r"/subjects/([^/]+)/versions"), self.versions),
            ("POST", re.compile(r"/subjects/([^/]+)/versions"), self.register),
            ("GET", re.compile(r"/subjects/([^/]+)/versions/([^/]+)"), self.version),
            ("GET", re.compile(r"/subjects/([^/]+)/versions/([^/]+)/schema"), self.raw_version),
            ("GET", re.compile(r"/subjects/([^/]+)/versions/([^/]+)/referencedby"), self.referenced_by),
            ("DELETE", re.compile(r"/subjects/([^/]+)/versions/([^/]+)"), self.delete_version),
            ("POST", re.compile(r"/subjects/([^/]+)"), self.lookup),
            ("DELETE", re.compile(r"/subjects/([^/]+)"), self.delete_subject),
            ("POST", re.compile(r"/compatibility/subjects/([^/]+)/versions"), self.compatibility_all),
            ("POST", re.compile(r"/compatibility/subjects/([^/]+)/versions/([^/]+)"), self.compatibility),
            ("GET", re.compile(r"/config"), self.get_config),
            ("PUT", re.compile(r"/config"), self.put_config),
            ("DELETE", re.compile(r"/config"), self.delete_global_config),
            ("GET", re.compile(r"/config/([^/]+)"), self.get_subject_config),
            ("PUT", re.compile(r"/config/([^/]+)"), self.put_subject_config),
            ("DELETE", re.compile(r"/config/([^/]+)"), self.delete_subject_config),
            ("GET", re.compile(r"/mode"), self.get_mode),
            ("PUT", re.compile(r"/mode"), self.put_mode),
            ("GET", re.compile(r"/mode/([^/]+)"), self.get_subject_mode),
            ("PUT", re.compile(r"/mode/([^/]+)"), self.put_subject_mode),
            ("DELETE", re.compile(r"/mode/([^/]+)"), self.delete_subject_mode),
        ]

    def handle(self, call: Call) -> tuple[int, Any]:
        """The answer to ``call``. Raises RegistryError (the shell writes it)."""
        path = call.path.rstrip("/") or "/"
        known_path = False
        for method, pattern, fn in self.routes:
            m = pattern.fullmatch(path)
            if m is None:
                continue
            known_path = True
            if method == call.method:
                args = [urllib.parse.unquote(g) for g in m.groups()]
                return fn(call, *args)
        if known_path:
            raise errors.RegistryError(405, "HTTP 405 Method Not Allowed")
        raise errors.RegistryError(404, "HTTP 404 Not Found")

    # -- schemas ----------------------------------------------------------------------------

    def root(self, call: Call) -> tuple[int, Any]:
        return 200, {}

    def types(self, call: Call) -> tuple[int, Any]:
        return 200, list(KINDS)

    def _readable_id(self, call: Call, schema_id: int, state: RegistryState) -> SchemaEntry:
        e = state.schema(schema_id)
        uses = state.uses_of(schema_id, deleted=True)
        if not any(call.guard.may(SUBJECT_READ, u.subject) for u in uses):
            call.guard.refuse(SCHEMA_READ, f"schema id {schema_id}")
        return e

    def schema_by_id(self, call: Call, sid: str) -> tuple[int, Any]:
        schema_id = _int(sid)
        fmt = call.query.get("format")

        def q(state: RegistryState) -> tuple[dict[str, Any], SchemaEntry, Any]:
            e = self._readable_id(call, schema_id, state)
            doc = _schema_json(e)
            if call.flag("fetchMaxId"):
                doc["maxId"] = state.max_id
            return doc, e, state.resolve(e.references) if fmt == "serialized" else ()
        return 200, _formatted(*self.store.read(q), fmt)

    def raw_by_id(self, call: Call, sid: str) -> tuple[int, Any]:
        schema_id = _int(sid)
        return 200, self.store.read(lambda s: _Raw(self._readable_id(call, schema_id, s).schema))

    def subjects_of_id(self, call: Call, sid: str) -> tuple[int, Any]:
        schema_id = _int(sid)

        def q(state: RegistryState) -> list[str]:
            self._readable_id(call, schema_id, state)
            return sorted({e.subject for e in state.uses_of(schema_id, deleted=call.flag("deleted"))
                           if call.guard.may(SUBJECT_READ, e.subject)})
        return 200, self.store.read(q)

    def versions_of_id(self, call: Call, sid: str) -> tuple[int, Any]:
        schema_id = _int(sid)

        def q(state: RegistryState) -> list[dict[str, Any]]:
            self._readable_id(call, schema_id, state)
            return [{"subject": e.subject, "version": e.version}
                    for e in state.uses_of(schema_id, deleted=call.flag("deleted"))
                    if call.guard.may(SUBJECT_READ, e.subject)]
        return 200, self.store.read(q)

    # -- subjects ---------------------------------------------------------------------------

    def subjects(self, call: Call) -> tuple[int, Any]:
        prefix = call.query.get("subjectPrefix", "")
        names = self.store.read(lambda s: s.subject_names(deleted=call.flag("deleted"), prefix=prefix,
                                                          deleted_only=call.flag("deletedOnly")))
        return 200, [n for n in names if call.guard.may(SUBJECT_READ, n)]

    def versions(self, call: Call, subject: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_READ, subject)
        return 200, self.store.read(lambda s: [e.version for e in s.versions(subject, deleted=call.flag("deleted"))])

    def version(self, call: Call, subject: str, version: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_READ, subject)
        fmt = call.query.get("format")

        def q(state: RegistryState) -> tuple[dict[str, Any], SchemaEntry, Any]:
            e = state.version(subject, version, deleted=call.flag("deleted"))
            return _entry_json(e), e, state.resolve(e.references) if fmt == "serialized" else ()
        return 200, _formatted(*self.store.read(q), fmt)

    def raw_version(self, call: Call, subject: str, version: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_READ, subject)
        return 200, self.store.read(lambda s: _Raw(s.version(subject, version, deleted=call.flag("deleted")).schema))

    def referenced_by(self, call: Call, subject: str, version: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_READ, subject)
        return 200, self.store.read(lambda s: s.referenced_by(subject, s.version(subject, version, deleted=True).version))

    def register(self, call: Call, subject: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_WRITE, subject)
        check_subject(subject)
        req = planner.schema_request(call.body)
        answer = self.store.write(lambda s: planner.register(s, subject, req, normalize=call.flag("normalize")))
        return 200, {"id": answer["id"]}

    def lookup(self, call: Call, subject: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_READ, subject)
        req = planner.schema_request(call.body)
        return 200, self.store.read(lambda s: _entry_json(planner.lookup(s, subject, req, deleted=call.flag("deleted"),
                                                                         normalize=call.flag("normalize"))))

    def delete_version(self, call: Call, subject: str, version: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_DELETE, subject)
        return 200, self.store.write(lambda s: planner.delete_version(s, subject, version,
                                                                      permanent=call.flag("permanent")))

    def delete_subject(self, call: Call, subject: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_DELETE, subject)
        return 200, self.store.write(lambda s: planner.delete_subject(s, subject, permanent=call.flag("permanent")))

    # -- compatibility ------------------------------------------------------------------------

    def _compat(self, call: Call, subject: str, version: str | None) -> tuple[int, Any]:
        call.guard.require(SUBJECT_WRITE, subject)
        req = planner.schema_request(call.body)
        found = self.store.read(lambda s: planner.check(s, subject, version, req, normalize=call.flag("normalize")))
        doc: dict[str, Any] = {"is_compatible": not found}
        if call.flag("verbose"):
            doc["messages"] = found
        return 200, doc

    def compatibility(self, call: Call, subject: str, version: str) -> tuple[int, Any]:
        return self._compat(call, subject, version)

    def compatibility_all(self, call: Call, subject: str) -> tuple[int, Any]:
        return self._compat(call, subject, None)

    # -- config and mode ----------------------------------------------------------------------

    def get_config(self, call: Call) -> tuple[int, Any]:
        call.guard.require(GLOBAL_COMPATIBILITY_READ, None)
        return 200, {"compatibilityLevel": self.store.read(lambda s: s.level(None))}

    def put_config(self, call: Call) -> tuple[int, Any]:
        call.guard.require(GLOBAL_COMPATIBILITY_WRITE, None)
        return 200, self.store.write(lambda s: planner.set_config(s, None, call.body))

    def delete_global_config(self, call: Call) -> tuple[int, Any]:
        call.guard.require(GLOBAL_COMPATIBILITY_WRITE, None)
        return 200, self.store.write(lambda s: planner.delete_config(s, None))

    def get_subject_config(self, call: Call, subject: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_COMPATIBILITY_READ, subject)

        def q(state: RegistryState) -> dict[str, Any]:
            if subject not in state.configs and not call.flag("defaultToGlobal"):
                raise errors.subject_level_compatibility_not_configured(subject)
            return {"compatibilityLevel": state.level(subject)}
        return 200, self.store.read(q)

    def put_subject_config(self, call: Call, subject: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_COMPATIBILITY_WRITE, subject)
        return 200, self.store.write(lambda s: planner.set_config(s, subject, call.body))

    def delete_subject_config(self, call: Call, subject: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_COMPATIBILITY_WRITE, subject)
        return 200, self.store.write(lambda s: planner.delete_config(s, subject))

    def get_mode(self, call: Call) -> tuple[int, Any]:
        call.guard.require(GLOBAL_COMPATIBILITY_READ, None)
        return 200, {"mode": self.store.read(lambda s: s.mode(None))}

    def put_mode(self, call: Call) -> tuple[int, Any]:
        call.guard.require(GLOBAL_COMPATIBILITY_WRITE, None)
        return 200, self.store.write(lambda s: planner.set_mode(s, None, call.body, force=call.flag("force")))

    def get_subject_mode(self, call: Call, subject: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_COMPATIBILITY_READ, subject)

        def q(state: RegistryState) -> dict[str, Any]:
            if subject not in state.modes and not call.flag("defaultToGlobal"):
                raise errors.subject_level_mode_not_configured(subject)
            return {"mode": state.mode(subject)}
        return 200, self.store.read(q)

    def put_subject_mode(self, call: Call, subject: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_COMPATIBILITY_WRITE, subject)
        return 200, self.store.write(lambda s: planner.set_mode(s, subject, call.body, force=call.flag("force")))

    def delete_subject_mode(self, call: Call, subject: str) -> tuple[int, Any]:
        call.guard.require(SUBJECT_COMPATIBILITY_WRITE, subject)
        return 200, self.store.write(lambda s: planner.delete_mode(s, subject))


class _Raw(str):
    """An answer written as the schema text itself (``…/schema`` endpoints)."""


__all__ = ["Call", "RegistryApi", "formats"]
