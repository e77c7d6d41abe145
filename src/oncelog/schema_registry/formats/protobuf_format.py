"""Protobuf schemas: ``.proto`` text or a base64 ``FileDescriptorProto`` (what confluent-kafka's
``ProtobufSerializer`` sends), both made a descriptor and stored as ``.proto`` text.

* Text is compiled by Google's own ``protoc`` (``grpcio-tools``), in a child process with a
  deadline (its errors are the 42201 message; its nesting limits are protoc's). Referenced
  schemas are written beside it under their reference names (import paths); the well-known
  types (``google/protobuf/*.proto``) come from grpcio-tools' include directory.
* A descriptor is checked by building it into a ``DescriptorPool`` with its dependencies.
* Canonical form: the descriptor printed back as ``.proto`` text (``proto_text``), so a schema
  sent as text or as a descriptor gets one id, and text is what Confluent's registry returns.
  ``serialized`` (GET ...?format=serialized) is the base64 descriptor of the stored text.

Compatibility (reader = the new schema for BACKWARD), Confluent's Protobuf rules: a message
the writer had is gone (MESSAGE_REMOVED); a field's number kept with another kind of type
(FIELD_KIND_CHANGED), a scalar outside its wire-compatible group (FIELD_SCALAR_KIND_CHANGED:
int32/uint32/int64/uint64/bool, sint32/sint64, fixed32/sfixed32, fixed64/sfixed64,
string/bytes), another message or enum type (FIELD_NAMED_TYPE_CHANGED); proto2 required
fields added or removed; a field taken out of a oneof (ONEOF_FIELD_REMOVED), several fields
moved into one oneof (MULTIPLE_FIELDS_MOVED_TO_ONEOF). Fields and messages added, and fields
removed, are compatible (unknown fields are skipped by readers).
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

from oncelog.schema_registry import errors
from oncelog.schema_registry.formats.common import PROTOBUF, Resolved

#: protoc's deadline (seconds)
PROTOC_TIMEOUT_S = 20.0
_MAIN = "oncelog_schema.proto"
_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]+$")


class ProtobufParsed:
    kind = PROTOBUF

    def __init__(self, fdp: Any, canonical: str) -> None:
        self.fdp = fdp
        self.canonical = canonical

    def incompatibilities(self, writer: "ProtobufParsed") -> list[str]:  # type: ignore[override]
        if not isinstance(writer, ProtobufParsed):
            return [f"{{errorType:'TYPE_MISMATCH', description:'a {writer.kind} schema cannot be read as Protobuf'}}"]
        return _compare(self.fdp, writer.fdp)


# -- building descriptors ---------------------------------------------------------------------


def _builtin(name: str) -> Any | None:
    """The FileDescriptorProto of a well-known file (google/protobuf/…, google/type/…,
    confluent/…) when its module is installed, else None."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    if not (name.startswith("google/") or name.startswith("confluent/")):
        return None
    module = name[:-len(".proto")].replace("/", ".") + "_pb2" if name.endswith(".proto") else None
    candidates = [module] if module else []
    if name.startswith("confluent/"):
        candidates.append("confluent_kafka.schema_registry." + (module or ""))
    for mod in candidates:
        try:
            __import__(mod)
        except ImportError:
            continue
    try:
        fd = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        return None
    out = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(out)
    return out


def _descriptor_of(ref: Resolved) -> Any:
    if ref.kind != PROTOBUF:
        raise errors.invalid_schema(f"reference {ref.name!r} is a {ref.kind} schema, not Protobuf")
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.ParseFromString(_compiled(ref.text, ref.references))
    fdp.name = ref.name
    return fdp


def _pool_for(fdp: Any, references: tuple[Resolved, ...]) -> Any:
    """A DescriptorPool holding ``fdp`` and everything it imports. Raises RegistryError."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    by_name = {r.name: r for r in references}
    added: set[str] = set()

    def add(file_proto: Any, depth: int) -> None:
        if depth > 32:
            raise errors.invalid_schema("imports nest more than 32 deep")
        for dep in file_proto.dependency:
            if dep in added:
                continue
            if dep in by_name:
                dep_proto = _descriptor_of(by_name[dep])
                nested = by_name[dep].references
                for r in nested:
                    by_name.setdefault(r.name, r)
            else:
                dep_proto = _builtin(dep)
                if dep_proto is None:
                    raise errors.invalid_schema(f"import {dep!r} is neither a reference nor a well-known type")
            added.add(dep)
            add(dep_proto, depth + 1)
            pool.Add(dep_proto)

    add(fdp, 0)
    try:
        pool.Add(fdp)
        pool.FindFileByName(fdp.name)
    except (TypeError, KeyError, ValueError) as exc:
        raise errors.invalid_schema(str(exc)) from None
    return pool


def _safe_name(name: str) -> str:
    if not name or name.startswith("/") or ".." in name.split("/") or "\\" in name or "\0" in name or len(name) > 255:
        raise errors.invalid_schema(f"reference name {name!r} is not a relative import path")
    return name


def _write_tree(root: str, refs: tuple[Resolved, ...], seen: set[str], depth: int) -> None:
    if depth > 32:
        raise errors.invalid_schema("references nest more than 32 deep")
    for ref in refs:
        if ref.name in seen:
            continue
        seen.add(ref.name)
        path = os.path.join(root, _safe_name(ref.name))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(ref.text)
        _write_tree(root, ref.references, seen, depth + 1)


@functools.lru_cache(maxsize=128)
def _compiled(text: str, references: tuple[Resolved, ...]) -> bytes:
    """``.proto`` text -> serialized FileDescriptorProto, by protoc in a child process. Cached
    (a schema is compiled once per process). Raises RegistryError (42201)."""
    import grpc_tools

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="oncelog-protoc-") as d:
        src = os.path.join(d, "src")
        os.makedirs(src)
        _write_tree(src, references, set(), 0)
        with open(os.path.join(src, _MAIN), "w", encoding="utf-8") as f:
            f.write(text)
        out = os.path.join(d, "out.pb")
        try:
            done = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"-I{include}",
                                   f"--descriptor_set_out={out}", _MAIN], capture_output=True,
                                  timeout=PROTOC_TIMEOUT_S, cwd=d)
        except subprocess.TimeoutExpired:
            raise errors.invalid_schema(f"protoc took longer than {PROTOC_TIMEOUT_S:.0f} s") from None
        if done.returncode != 0 or not os.path.exists(out):
            why = done.stderr.decode("utf-8", "replace").replace(src + os.sep, "").strip()
            raise errors.invalid_schema(why[:2000] or "protoc refused the schema")
        with open(out, "rb") as f:
            data = f.read()
    from google.protobuf import descriptor_pb2

    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(data)
    return fds.file[0].SerializeToString()


def _from_base64(text: str) -> Any | None:
    """A FileDescriptorProto from base64 text, or None when the text is not one."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if not stripped or not _BASE64.match(stripped) or "syntax" in stripped:
        return None
    try:
        raw = base64.b64decode(stripped, validate=False)
    except (binascii.Error, ValueError):
        return None
    fdp = descriptor_pb2.FileDescriptorProto()
    try:
        fdp.ParseFromString(raw)
    except (DecodeError, RuntimeError):
        return None
    if not (fdp.message_type or fdp.enum_type or fdp.service or fdp.package or fdp.syntax):
        return None
    return fdp


def parse(text: str, references: tuple[Resolved, ...] = (), *, normalize: bool = False) -> ProtobufParsed:
    from google.protobuf import descriptor_pb2

    fdp = _from_base64(text)
    if fdp is None:
        fdp = descriptor_pb2.FileDescriptorProto()
        fdp.ParseFromString(_compiled(text, references))
    if not fdp.name:
        fdp.name = _MAIN
    _pool_for(fdp, references)
    canonical = proto_text(fdp)
    return ProtobufParsed(fdp, canonical)


def serialized(text: str, references: tuple[Resolved, ...] = ()) -> str:
    """The stored schema as base64 FileDescriptorProto (``format=serialized``)."""
    fdp = _from_base64(text)
    if fdp is not None:
        return text.strip()
    return base64.standard_b64encode(_compiled(text, references)).decode("ascii")


# -- the printer -------------------------------------------------------------------------------

_TYPE_NAMES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
               8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32",
               18: "sint64"}
_MESSAGE, _ENUM, _GROUP = 11, 14, 10
_OPTIONAL, _REQUIRED, _REPEATED = 1, 2, 3


def _quote(s: str | bytes) -> str:
    raw = s.encode("utf-8") if isinstance(s, str) else s
    out = []
    for b in raw:
        c = chr(b)
        if c in "\"\\":
            out.append("\\" + c)
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _options(opts: Any, skip: tuple[str, ...] = ()) -> list[str]:
    """``name = value`` of each option set (extensions as ``(full.name)``)."""
    out = []
    for fd, value in opts.ListFields():
        if fd.name in skip or fd.name == "uninterpreted_option":
            continue
        name = f"({fd.full_name})" if fd.is_extension else fd.name
        values = value if fd.label == _REPEATED else [value]
        for v in values:
            if fd.type == _ENUM:
                text = fd.enum_type.values_by_number[v].name if v in fd.enum_type.values_by_number else str(v)
            elif fd.type == _MESSAGE:
                continue  # message-valued options (rare) are not printed
            elif isinstance(v, bool):
                text = "true" if v else "false"
            elif isinstance(v, (str, bytes)):
                text = _quote(v)
            else:
                text = repr(v)
            out.append(f"{name} = {text}")
    return out


def _camel(name: str) -> str:
    out, upper = [], False
    for c in name:
        if c == "_":
            upper = True
        elif upper:
            out.append(c.upper())
            upper = False
        else:
            out.append(c)
    return "".join(out)


def proto_text(fdp: Any) -> str:
    """``fdp`` as ``.proto`` text: deterministic (protoc of this text gives back the same
    descriptor, up to the file name and source info)."""
    lines: list[str] = []
    syntax = fdp.syntax or "proto2"
    lines.append(f'syntax = "{syntax}";')
    if fdp.package:
        lines.append(f"package {fdp.package};")
    public, weak = set(fdp.public_dependency), set(fdp.weak_dependency)
    for i, dep in enumerate(fdp.dependency):
        kind = "public " if i in public else "weak " if i in weak else ""
        lines.append(f'import {kind}"{dep}";')
    for opt in _options(fdp.options):
        lines.append(f"option {opt};")
    for msg in fdp.message_type:
        _message(lines, msg, "", syntax)
    for enum in fdp.enum_type:
        _enum(lines, enum, "")
    for svc in fdp.service:
        lines.append(f"service {svc.name} {{")
        for opt in _options(svc.options):
            lines.append(f"  option {opt};")
        for m in svc.method:
            cs = "stream " if m.client_streaming else ""
            ss = "stream " if m.server_streaming else ""
            opts = _options(m.options)
            body = " {\n" + "".join(f"    option {o};\n" for o in opts) + "  }" if opts else ";"
            lines.append(f"  rpc {m.name}({cs}{m.input_type}) returns ({ss}{m.output_type}){body}")
        lines.append("}")
    for ext in fdp.extension:
        lines.append(f"extend {ext.extendee} {{")
        lines.append("  " + _field(ext, syntax, {}))
        lines.append("}")
    return "\n".join(lines) + "\n"


def _field(f: Any, syntax: str, maps: dict[str, Any]) -> str:
    if f.type == _MESSAGE and f.type_name in maps and f.label == _REPEATED:
        entry = maps[f.type_name]
        k, v = entry.field[0], entry.field[1]
        kt = _TYPE_NAMES.get(k.type, k.type_name)
        vt = v.type_name if v.type in (_MESSAGE, _ENUM) else _TYPE_NAMES[v.type]
        label, typ = "", f"map<{kt}, {vt}>"
    else:
        typ = f.type_name if f.type in (_MESSAGE, _ENUM, _GROUP) else _TYPE_NAMES.get(f.type, "bytes")
        if f.label == _REPEATED:
            label = "repeated "
        elif syntax == "proto3":
            label = "optional " if f.proto3_optional else ""
        elif syntax == "proto2" and not f.HasField("oneof_index"):
            label = "required " if f.label == _REQUIRED else "optional "
        else:
            label = ""
    opts = _options(f.options)
    if f.HasField("default_value"):
        d = f.default_value
        opts.insert(0, "default = " + (_quote(d) if f.type in (9, 12) else d))
    if f.HasField("json_name") and f.json_name != _camel(f.name):
        opts.append(f"json_name = {_quote(f.json_name)}")
    suffix = f" [{', '.join(opts)}]" if opts else ""
    return f"{label}{typ} {f.name} = {f.number}{suffix};"


def _ranges(lines: list[str], pad: str, msg_or_enum: Any, inclusive_end: bool) -> None:
    for r in msg_or_enum.reserved_range:
        end = r.end if inclusive_end else r.end - 1
        lines.append(f"{pad}reserved {r.start};" if end == r.start else
                     f"{pad}reserved {r.start} to {'max' if end >= 536870911 else end};")
    for name in msg_or_enum.reserved_name:
        lines.append(f"{pad}reserved {_quote(name)};")


def _message(lines: list[str], msg: Any, pad: str, syntax: str) -> None:
    lines.append(f"{pad}message {msg.name} {{")
    inner = pad + "  "
    for opt in _options(msg.options, skip=("map_entry",)):
        lines.append(f"{inner}option {opt};")
    maps = {}
    for nested in msg.nested_type:
        if nested.options.map_entry:
            maps[nested.name] = nested
    full_maps = {}
    for f in msg.field:
        if f.type == _MESSAGE and f.type_name.rsplit(".", 1)[-1] in maps and f.label == _REPEATED:
            full_maps[f.type_name] = maps[f.type_name.rsplit(".", 1)[-1]]
    real_oneofs = {i for i, f in ((f.oneof_index, f) for f in msg.field if f.HasField("oneof_index"))
                   if not f.proto3_optional}
    printed_oneofs: set[int] = set()
    for f in msg.field:
        if f.HasField("oneof_index") and f.oneof_index in real_oneofs:
            idx = f.oneof_index
            if idx in printed_oneofs:
                continue
            printed_oneofs.add(idx)
            lines.append(f"{inner}oneof {msg.oneof_decl[idx].name} {{")
            for opt in _options(msg.oneof_decl[idx].options):
                lines.append(f"{inner}  option {opt};")
            for g in msg.field:
                if g.HasField("oneof_index") and g.oneof_index == idx:
                    lines.append(f"{inner}  " + _field(g, "oneof", full_maps))
            lines.append(f"{inner}}}")
        else:
            lines.append(inner + _field(f, syntax, full_maps))
    for nested in msg.nested_type:
        if not nested.options.map_entry:
            _message(lines, nested, inner, syntax)
    for enum in msg.enum_type:
        _enum(lines, enum, inner)
    for r in msg.extension_range:
        end = r.end - 1
        lines.append(f"{inner}extensions {r.start} to {'max' if end >= 536870911 else end};")
    _ranges(lines, inner, msg, inclusive_end=False)
    for ext in msg.extension:
        lines.append(f"{inner}extend {ext.extendee} {{")
        lines.append(f"{inner}  " + _field(ext, syntax, {}))
        lines.append(f"{inner}}}")
    lines.append(f"{pad}}}")


def _enum(lines: list[str], enum: Any, pad: str) -> None:
    lines.append(f"{pad}enum {enum.name} {{")
    for opt in _options(enum.options):
        lines.append(f"{pad}  option {opt};")
    for v in enum.value:
        opts = _options(v.options)
        lines.append(f"{pad}  {v.name} = {v.number}" + (f" [{', '.join(opts)}]" if opts else "") + ";")
    _ranges(lines, pad + "  ", enum, inclusive_end=True)
    lines.append(f"{pad}}}")


# -- compatibility ------------------------------------------------------------------------------

_GROUPS = [{5, 13, 3, 4, 8}, {17, 18}, {7, 15}, {6, 16}, {9, 12}]


def _messages(fdp: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    stack = [(f".{fdp.package}" if fdp.package else "", m) for m in fdp.message_type]
    while stack:
        prefix, m = stack.pop()
        name = f"{prefix}.{m.name}"
        out[name] = m
        stack.extend((name, n) for n in m.nested_type if not n.options.map_entry)
    return out


def _scalar_ok(a: int, b: int) -> bool:
    return a == b or any(a in g and b in g for g in _GROUPS)


def _compare(reader: Any, writer: Any) -> list[str]:
    out: list[str] = []

    def bad(kind: str, where: str) -> None:
        if len(out) < 50:
            out.append(f"{{errorType:'{kind}', description:'at {where}'}}")

    r_msgs, w_msgs = _messages(reader), _messages(writer)
    for name, wm in w_msgs.items():
        rm = r_msgs.get(name)
        if rm is None:
            bad("MESSAGE_REMOVED", name)
            continue
        r_fields = {f.number: f for f in rm.field}
        w_fields = {f.number: f for f in wm.field}
        moved: dict[int, int] = {}
        for num, wf in w_fields.items():
            rf = r_fields.get(num)
            where = f"{name}.{wf.name} ({num})"
            if rf is None:
                if reader.syntax != "proto3" and wf.label == _REQUIRED:
                    bad("REQUIRED_FIELD_REMOVED", where)
                continue
            w_named, r_named = wf.type in (_MESSAGE, _ENUM, _GROUP), rf.type in (_MESSAGE, _ENUM, _GROUP)
            if w_named != r_named or (w_named and (wf.type == _ENUM) != (rf.type == _ENUM)):
                bad("FIELD_KIND_CHANGED", where)
            elif w_named and wf.type_name != rf.type_name:
                bad("FIELD_NAMED_TYPE_CHANGED", where)
            elif not w_named and not _scalar_ok(rf.type, wf.type):
                bad("FIELD_SCALAR_KIND_CHANGED", where)
            if (rf.label == _REQUIRED) != (wf.label == _REQUIRED):
                bad("REQUIRED_FIELD_ADDED" if rf.label == _REQUIRED else "REQUIRED_FIELD_REMOVED", where)
            w_oneof = wf.HasField("oneof_index") and not wf.proto3_optional
            r_oneof = rf.HasField("oneof_index") and not rf.proto3_optional
            if w_oneof and not r_oneof:
                bad("ONEOF_FIELD_REMOVED", where)
            elif r_oneof and not w_oneof:
                moved[rf.oneof_index] = moved.get(rf.oneof_index, 0) + 1
        for num, rf in r_fields.items():
            if num not in w_fields and rf.label == _REQUIRED:
                bad("REQUIRED_FIELD_ADDED", f"{name}.{rf.name} ({num})")
        for idx, count in moved.items():
            if count > 1:
                bad("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"{name}.{rm.oneof_decl[idx].name}")
    return out
