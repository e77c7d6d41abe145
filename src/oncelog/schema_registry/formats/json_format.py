"""JSON Schema: the schema is checked against its draft's meta-schema by ``jsonschema``
(``validator_for(schema).check_schema``; draft 7 when ``$schema`` names none).

Canonical form: the schema's JSON, compact, keys in the order given; ``normalize`` sorts keys.

Compatibility. No library answers "can every document valid under the writer's schema be read
by the reader's?", so this module does, for the keywords Confluent's registry compares (its
JSON Schema rules; each finding is named as Confluent names it):

* ``type``: the reader's types include the writer's (``integer`` is read as ``number``);
* objects: a property of both is compared recursively; a property only the writer has must be
  allowed by the reader's ``additionalProperties`` (``false``: PROPERTY_REMOVED_FROM_CLOSED_
  CONTENT_MODEL); a property only the reader has must not narrow what an open writer may have
  sent (PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL, unless the reader's property accepts anything);
  a property the reader requires that the writer did not (REQUIRED_PROPERTY_ADDED...);
  ``additionalProperties`` narrowed (ADDITIONAL_PROPERTIES_NARROWED);
* ``enum`` narrowed; string ``maxLength``/``minLength``/``pattern``; number ``maximum``/
  ``minimum``/``exclusive*``/``multipleOf``; array ``items``, ``maxItems``/``minItems``,
  ``uniqueItems``;
* ``oneOf``/``anyOf``: every writer branch read by some reader branch; ``allOf`` branch by
  branch;
* ``$ref``: local (``#/...``) and to references (by their name), followed; a pair of references
  already being compared is taken as compatible (recursive schemas terminate).

Boolean schemas: ``true`` reads everything, ``false`` is written by nothing.
"""

from __future__ import annotations

from typing import Any

from oncelog.schema_registry import errors
from oncelog.schema_registry.formats.common import JSON, Resolved, compact, load_json

MAX_DEPTH = 64


class JsonParsed:
    kind = JSON

    def __init__(self, doc: Any, canonical: str, refs: dict[str, Any]) -> None:
        self.doc = doc
        self.canonical = canonical
        self.refs = refs  # reference name -> its document (own references merged)

    def incompatibilities(self, writer: "JsonParsed") -> list[str]:  # type: ignore[override]
        if not isinstance(writer, JsonParsed):
            return [f"{{errorType:'TYPE_MISMATCH', description:'a {writer.kind} schema cannot be read as JSON'}}"]
        out: list[str] = []
        _Compare(self, writer, out).check(self.doc, writer.doc, "#", 0, self.doc, writer.doc)
        return out


def _pointer(root: Any, fragment: str) -> Any:
    node = root
    for part in [p for p in fragment.lstrip("/").split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


_NUMERIC = {"number", "integer"}


def _types(s: dict[str, Any]) -> set[str] | None:
    t = s.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else {x for x in t if isinstance(x, str)}


class _Compare:
    def __init__(self, reader: JsonParsed, writer: JsonParsed, out: list[str]) -> None:
        self.reader = reader
        self.writer = writer
        self.out = out
        self.pairs: set[tuple[str, str]] = set()

    def bad(self, kind: str, path: str) -> None:
        if len(self.out) < 50:
            self.out.append(f"{{errorType:'{kind}', description:'at path {path}'}}")

    def deref(self, parsed: JsonParsed, s: Any, root: Any) -> tuple[Any, Any, str | None]:
        """Follows ``$ref`` (one hop): (schema, its root, the ref followed or None)."""
        if not isinstance(s, dict) or not isinstance(s.get("$ref"), str):
            return s, root, None
        ref = s["$ref"]
        base, _, fragment = ref.partition("#")
        target_root = root if not base else parsed.refs.get(base)
        if target_root is None:
            return {}, root, ref  # unresolvable: taken as accepting anything
        target = _pointer(target_root, fragment)
        return ({} if target is None else target), target_root, ref

    def check(self, r: Any, w: Any, path: str, depth: int, r_root: Any, w_root: Any) -> None:
        if depth > MAX_DEPTH:
            self.bad("TOO_DEEP", path)
            return
        r, r_root, r_ref = self.deref(self.reader, r, r_root)
        w, w_root, w_ref = self.deref(self.writer, w, w_root)
        if r_ref is not None or w_ref is not None:
            key = (f"{id(r_root)}{r_ref}", f"{id(w_root)}{w_ref}")
            if key in self.pairs:
                return
            self.pairs.add(key)
            if depth + 1 > MAX_DEPTH:
                self.bad("TOO_DEEP", path)
                return
            r, r_root, _ = self.deref(self.reader, r, r_root) if isinstance(r, dict) and "$ref" in r else (r, r_root, None)
        if r is True or r == {} or w is False:
            return
        if r is False:
            self.bad("SCHEMA_NARROWED", path)
            return
        if w is True:
            w = {}
        if not isinstance(r, dict) or not isinstance(w, dict):
            return
        for comb in ("oneOf", "anyOf"):
            if isinstance(r.get(comb), list):
                self.combined(r[comb], w, comb, path, depth, r_root, w_root)
                return
        for comb in ("oneOf", "anyOf"):
            if isinstance(w.get(comb), list):
                for i, branch in enumerate(w[comb]):
                    self.check(r, branch, f"{path}/{comb}/{i}", depth + 1, r_root, w_root)
                return
        if isinstance(r.get("allOf"), list) or isinstance(w.get("allOf"), list):
            ra, wa = r.get("allOf") or [], w.get("allOf") or []
            if len(ra) != len(wa):
                self.bad("COMBINED_TYPE_SUBSCHEMAS_CHANGED", path)
            for i, (rb, wb) in enumerate(zip(ra, wa)):
                self.check(rb, wb, f"{path}/allOf/{i}", depth + 1, r_root, w_root)
        rt, wt = _types(r), _types(w)
        if rt is not None:
            if wt is None:
                self.bad("TYPE_NARROWED", path)
                return
            missing = {t for t in wt if t not in rt and not (t == "integer" and "number" in rt)}
            if missing:
                self.bad("TYPE_NARROWED" if rt & wt or rt & _NUMERIC and wt & _NUMERIC else "TYPE_CHANGED", path)
                return
        if "enum" in r:
            if "enum" not in w or any(v not in r["enum"] for v in w["enum"] if isinstance(r["enum"], list)):
                self.bad("ENUM_ARRAY_NARROWED", path)
        if "const" in r and r.get("const") != w.get("const", object()):
            self.bad("ENUM_ARRAY_NARROWED", path)
        self.bounds(r, w, path)
        self.objects(r, w, path, depth, r_root, w_root)
        self.arrays(r, w, path, depth, r_root, w_root)

    def combined(self, branches: list[Any], w: dict[str, Any], comb: str, path: str, depth: int,
                 r_root: Any, w_root: Any) -> None:
        w_branches = w.get(comb) if isinstance(w.get(comb), list) else \
            w.get("oneOf") if isinstance(w.get("oneOf"), list) else \
            w.get("anyOf") if isinstance(w.get("anyOf"), list) else [w]
        for i, wb in enumerate(w_branches):
            if not any(self.quiet(rb, wb, depth + 1, r_root, w_root) for rb in branches):
                self.bad("COMBINED_TYPE_SUBSCHEMAS_CHANGED", f"{path}/{comb}/{i}")

    def quiet(self, r: Any, w: Any, depth: int, r_root: Any, w_root: Any) -> bool:
        saved, self.out = self.out, []
        try:
            self.check(r, w, "#", depth, r_root, w_root)
            return not self.out
        finally:
            self.out = saved

    def bounds(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        for key, narrower, name in (("maxLength", lambda a, b: a < b, "MAX_LENGTH"),
                                    ("minLength", lambda a, b: a > b, "MIN_LENGTH"),
                                    ("maximum", lambda a, b: a < b, "MAXIMUM"),
                                    ("minimum", lambda a, b: a > b, "MINIMUM"),
                                    ("exclusiveMaximum", lambda a, b: a < b, "EXCLUSIVE_MAXIMUM"),
                                    ("exclusiveMinimum", lambda a, b: a > b, "EXCLUSIVE_MINIMUM"),
                                    ("maxItems", lambda a, b: a < b, "MAX_ITEMS"),
                                    ("minItems", lambda a, b: a > b, "MIN_ITEMS"),
                                    ("maxProperties", lambda a, b: a < b, "MAX_PROPERTIES"),
                                    ("minProperties", lambda a, b: a > b, "MIN_PROPERTIES")):
            rv, wv = r.get(key), w.get(key)
            if isinstance(rv, (int, float)) and not isinstance(rv, bool):
                if not isinstance(wv, (int, float)) or isinstance(wv, bool):
                    self.bad(f"{name}_ADDED", path)
                elif narrower(rv, wv):
                    self.bad(f"{name}_{'DECREASED' if name.startswith('MAX') or 'MAXIMUM' in name else 'INCREASED'}", path)
        if "pattern" in r and r.get("pattern") != w.get("pattern"):
            self.bad("PATTERN_CHANGED" if "pattern" in w else "PATTERN_ADDED", path)
        rm, wm = r.get("multipleOf"), w.get("multipleOf")
        if isinstance(rm, (int, float)) and rm and (not isinstance(wm, (int, float)) or (wm / rm) % 1):
            self.bad("MULTIPLE_OF_CHANGED", path)
        if r.get("uniqueItems") is True and w.get("uniqueItems") is not True:
            self.bad("UNIQUE_ITEMS_ADDED", path)

    def objects(self, r: dict[str, Any], w: dict[str, Any], path: str, depth: int, r_root: Any, w_root: Any) -> None:
        rp = r.get("properties") if isinstance(r.get("properties"), dict) else {}
        wp = w.get("properties") if isinstance(w.get("properties"), dict) else {}
        r_add, w_add = r.get("additionalProperties", True), w.get("additionalProperties", True)
        for name, rs in rp.items():
            if name in wp:
                self.check(rs, wp[name], f"{path}/properties/{name}", depth + 1, r_root, w_root)
            elif w_add is not False and not (rs is True or rs == {}):
                if isinstance(w_add, dict) and w_add:
                    self.check(rs, w_add, f"{path}/properties/{name}", depth + 1, r_root, w_root)
                else:
                    self.bad("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", f"{path}/properties/{name}")
        for name, ws in wp.items():
            if name in rp:
                continue
            if r_add is False:
                self.bad("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", f"{path}/properties/{name}")
            elif isinstance(r_add, dict):
                self.check(r_add, ws, f"{path}/properties/{name}", depth + 1, r_root, w_root)
        r_req = set(r.get("required") or []) if isinstance(r.get("required"), list) else set()
        w_req = set(w.get("required") or []) if isinstance(w.get("required"), list) else set()
        for name in sorted(r_req - w_req):
            self.bad("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", f"{path}/properties/{name}")
        if r_add is False and w_add is not False and not wp and not rp:
            self.bad("ADDITIONAL_PROPERTIES_REMOVED", path)
        elif isinstance(r_add, dict) and r_add and w_add is not False:
            self.check(r_add, {} if w_add is True else w_add, f"{path}/additionalProperties", depth + 1,
                       r_root, w_root)

    def arrays(self, r: dict[str, Any], w: dict[str, Any], path: str, depth: int, r_root: Any, w_root: Any) -> None:
        ri, wi = r.get("items"), w.get("items")
        if isinstance(ri, dict) or isinstance(ri, bool):
            self.check(ri, wi if wi is not None else {}, f"{path}/items", depth + 1, r_root, w_root)
        elif isinstance(ri, list):
            wl = wi if isinstance(wi, list) else []
            for i, rs in enumerate(ri):
                self.check(rs, wl[i] if i < len(wl) else (wi if isinstance(wi, dict) else {}),
                           f"{path}/items/{i}", depth + 1, r_root, w_root)


def _collect(refs: tuple[Resolved, ...], out: dict[str, Any], seen: set[str]) -> None:
    for ref in refs:
        if ref.kind != JSON:
            raise errors.invalid_schema(f"reference {ref.name!r} is a {ref.kind} schema, not JSON")
        if ref.name in seen:
            continue
        seen.add(ref.name)
        out[ref.name] = load_json(ref.text)
        _collect(ref.references, out, seen)


def parse(text: str, references: tuple[Resolved, ...] = (), *, normalize: bool = False) -> JsonParsed:
    from jsonschema import Draft7Validator, SchemaError
    from jsonschema.validators import validator_for

    doc = load_json(text)
    if not isinstance(doc, (dict, bool)):
        raise errors.invalid_schema("a JSON schema must be an object or a boolean")
    refs: dict[str, Any] = {}
    _collect(references, refs, set())
    try:
        validator_for(doc, default=Draft7Validator).check_schema(doc)
    except SchemaError as exc:
        raise errors.invalid_schema(exc.message) from None
    except RecursionError:
        raise errors.invalid_schema("nested too deeply") from None
    canonical = compact(_sorted(doc)) if normalize else compact(doc)
    return JsonParsed(doc, canonical, refs)


def _sorted(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _sorted(doc[k]) for k in sorted(doc)}
    if isinstance(doc, list):
        return [_sorted(x) for x in doc]
    return doc
