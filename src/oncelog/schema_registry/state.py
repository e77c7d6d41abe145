"""The registry's state: what the records of ``_schemas`` say, replayed in order, and the
questions the REST API asks of it. Pure: no I/O, no threads (the store holds the lock).

Invariants:

* ``apply`` is the only way the state changes, one record at a time in the topic's order;
  every broker that replays the same records has the same state (ids, versions, configs).
* an id names one schema content (kind, canonical text, references) for ever: the same content
  registered under another subject gets the same id; ``max_id`` (the largest id ever seen,
  watermark included) only grows, so a new id is never one given before.
* a version is live, soft-deleted (``deleted``) or gone (a tombstone removed it).
"""

from __future__ import annotations

from typing import Iterable

from oncelog.schema_registry import errors
from oncelog.schema_registry.formats import Reference, Resolved
from oncelog.schema_registry.records import CONFIG, MODE, SCHEMA, WATERMARK, Decoded, SchemaEntry, decode, entry_of

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
#: how deep references may chain (a schema referring to one referring to one …)
MAX_REFERENCE_DEPTH = 16
MAX_SUBJECT_CHARS = 255


def check_subject(subject: str) -> str:
    """Raises 42208 for a subject name the registry refuses (empty, too long, control chars)."""
    if not subject or len(subject) > MAX_SUBJECT_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in subject):
        raise errors.invalid_subject(subject[:MAX_SUBJECT_CHARS])
    return subject


class RegistryState:
    def __init__(self, default_level: str = "BACKWARD") -> None:
        self.default_level = default_level
        self.subjects: dict[str, dict[int, SchemaEntry]] = {}
        self.by_id: dict[int, SchemaEntry] = {}  # the first entry seen with the id (its content)
        self.id_of: dict[tuple[str, str, tuple[Reference, ...]], int] = {}
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        #: subject -> ids of its live versions (read without a lock by the produce path: each
        #: value is replaced whole, never changed in place)
        self.live_ids: dict[str, frozenset[int]] = {}
        self.records = 0

    # -- replay -----------------------------------------------------------------------------

    def apply_raw(self, key: bytes | None, value: bytes | None) -> None:
        d = decode(key, value)
        self.records += 1
        if d is not None:
            self.apply(d)

    def apply(self, d: Decoded) -> None:
        if d.keytype == SCHEMA:
            if d.value is None:
                if d.subject is not None and d.version is not None:
                    self._remove(d.subject, d.version)
                return
            e = entry_of(d)
            if e is not None:
                self._put(e)
        elif d.keytype == CONFIG:
            level = d.value.get("compatibilityLevel") if d.value is not None else None
            if level in LEVELS:
                self.configs[d.subject] = level
            elif d.value is None:
                self.configs.pop(d.subject, None)
        elif d.keytype == MODE:
            mode = d.value.get("mode") if d.value is not None else None
            if mode in MODES:
                self.modes[d.subject] = mode
            elif d.value is None:
                self.modes.pop(d.subject, None)
        elif d.keytype == WATERMARK and d.value is not None:
            sid = d.value.get("id")
            if isinstance(sid, int) and not isinstance(sid, bool):
                self.max_id = max(self.max_id, sid)

    def _put(self, e: SchemaEntry) -> None:
        known = self.by_id.get(e.id)
        if known is not None and known.content != e.content:
            return  # an id is one content for ever: a record saying otherwise is skipped
        self.subjects.setdefault(e.subject, {})[e.version] = e
        if known is None:
            self.by_id[e.id] = e
            self.id_of.setdefault(e.content, e.id)
        self.max_id = max(self.max_id, e.id)
        self._refresh(e.subject)

    def _remove(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject)
        if not versions or version not in versions:
            return
        gone = versions.pop(version)
        if not versions:
            del self.subjects[subject]
        if not any(x.id == gone.id for vs in self.subjects.values() for x in vs.values()):
            self.by_id.pop(gone.id, None)
            if self.id_of.get(gone.content) == gone.id:
                del self.id_of[gone.content]
        self._refresh(subject)

    def _refresh(self, subject: str) -> None:
        ids = frozenset(e.id for e in self.subjects.get(subject, {}).values() if not e.deleted)
        if ids:
            self.live_ids[subject] = ids
        else:
            self.live_ids.pop(subject, None)

    # -- questions ----------------------------------------------------------------------------

    def level(self, subject: str | None) -> str:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, self.default_level)

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, "READWRITE")

    def subject_names(self, *, deleted: bool = False, prefix: str = "", deleted_only: bool = False) -> list[str]:
        out = []
        for s, versions in self.subjects.items():
            if not s.startswith(prefix):
                continue
            live = any(not e.deleted for e in versions.values())
            if deleted_only:
                if not live:
                    out.append(s)
            elif live or deleted:
                out.append(s)
        return sorted(out)

    def versions(self, subject: str, *, deleted: bool = False) -> list[SchemaEntry]:
        """The subject's versions in order (soft-deleted ones too with ``deleted``). Raises
        40401 when it has none."""
        found = [e for _, e in sorted(self.subjects.get(subject, {}).items()) if deleted or not e.deleted]
        if not found:
            raise errors.subject_not_found(subject)
        return found

    def version(self, subject: str, version: str | int, *, deleted: bool = False) -> SchemaEntry:
        """``version``: a number, ``latest`` or -1. Raises 42202, 40401, 40402."""
        number = parse_version(version)
        all_versions = self.subjects.get(subject, {})
        if not any(deleted or not e.deleted for e in all_versions.values()):
            raise errors.subject_not_found(subject)
        if number == -1:
            return self.versions(subject, deleted=deleted)[-1]
        e = all_versions.get(number)
        if e is None or (e.deleted and not deleted):
            raise errors.version_not_found(number)
        return e

    def schema(self, schema_id: int) -> SchemaEntry:
        e = self.by_id.get(schema_id)
        if e is None:
            raise errors.schema_not_found(schema_id)
        return e

    def uses_of(self, schema_id: int, *, deleted: bool = False) -> list[SchemaEntry]:
        return sorted((e for vs in self.subjects.values() for e in vs.values()
                       if e.id == schema_id and (deleted or not e.deleted)), key=lambda e: (e.subject, e.version))

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of live schemas that reference ``subject`` ``version``."""
        return sorted({e.id for vs in self.subjects.values() for e in vs.values()
                       if not e.deleted and any(r.subject == subject and r.version == version for r in e.references)})

    def find(self, subject: str, content: tuple[str, str, tuple[Reference, ...]], *,
             deleted: bool = False) -> SchemaEntry | None:
        """The subject's version with this content (the live one first)."""
        found = [e for _, e in sorted(self.subjects.get(subject, {}).items()) if e.content == content]
        live = [e for e in found if not e.deleted]
        if live:
            return live[0]
        return found[0] if found and deleted else None

    def resolve(self, refs: Iterable[Reference], depth: int = 0, trail: tuple[tuple[str, int], ...] = ()
                ) -> tuple[Resolved, ...]:
        """The referenced schemas, each with its own references resolved. Raises 42201 for a
        reference that is not registered, a cycle, or a chain deeper than MAX_REFERENCE_DEPTH."""
        out = []
        for r in refs:
            if depth >= MAX_REFERENCE_DEPTH:
                raise errors.invalid_schema(f"references chain more than {MAX_REFERENCE_DEPTH} deep")
            try:
                e = self.version(r.subject, r.version, deleted=True)
            except errors.RegistryError:
                raise errors.invalid_schema(f"reference {r.name!r}: version {r.version} of subject "
                                            f"{r.subject!r} is not registered") from None
            at = (e.subject, e.version)
            if at in trail:
                raise errors.invalid_schema(f"reference cycle through subject {e.subject!r} version {e.version}")
            out.append(Resolved(r.name, e.kind, e.schema, self.resolve(e.references, depth + 1, trail + (at,))))
        return tuple(out)

    def next_version(self, subject: str) -> int:
        return max(self.subjects.get(subject, {}), default=0) + 1


def parse_version(version: str | int) -> int:
    """A version of the URL: 1 .. 2^31-1, ``latest`` or -1 (-1 for both). Raises 42202."""
    if isinstance(version, int) and not isinstance(version, bool):
        number = version
    elif isinstance(version, str) and version.lower() == "latest":
        return -1
    else:
        try:
            number = int(str(version))
        except ValueError:
            raise errors.invalid_version(version) from None
    if number == -1:
        return -1
    if not 1 <= number <= 2**31 - 1:
        raise errors.invalid_version(version)
    return number


def replay(records: Iterable[tuple[bytes | None, bytes | None]], default_level: str = "BACKWARD") -> RegistryState:
    """A state from records (tests, tools)."""
    state = RegistryState(default_level)
    for k, v in records:
        state.apply_raw(k, v)
    return state
