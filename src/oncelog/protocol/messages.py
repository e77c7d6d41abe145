"""Version-agnostic construction of kio messages. Sans-IO.

kio generates one class per API version. A handler serves every version we advertise by asking
for the classes of the request's version and passing all fields it knows; fields the version
does not have are dropped (``Builder``, ``make``). A name that no version of the message has is
a typo, not an older version: ``Builder`` raises TypeError for it instead of dropping it.
``error_response`` builds a whole-request error answer for any API, as Kafka's
``AbstractRequest.getErrorResponse`` does.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.schema import field_kinds


@cache
def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


_NO_THROTTLE = datetime.timedelta(0)
#: The longest ``error_message`` an answer carries, in characters. Kafka's are a line; a longer
#: one echoes a client's string (a config value, a name), and past a Kafka string's 32,767
#: UTF-8 bytes a non-flexible version cannot encode it at all: the whole answer was lost to a
#: ``bug:`` line (issue 26 review, the class of row 2). Cut here, where every answer is built.
MAX_ERROR_MESSAGE = 1024


def make(cls: type, **kw: Any) -> Any:
    """Instantiate ``cls`` with the keyword arguments it has fields for (others are dropped).

    ``throttle_time`` defaults to zero: this broker does not throttle (no quotas yet). An
    ``error_message`` longer than ``MAX_ERROR_MESSAGE`` characters is cut to it in its middle
    (where an echoed string is; its start and end, which say what was refused, are kept)."""
    names = field_names(cls)
    args = {k: v for k, v in kw.items() if k in names}
    if "throttle_time" in names and "throttle_time" not in args:
        args["throttle_time"] = _NO_THROTTLE
    message = args.get("error_message")
    if message is not None and len(message) > MAX_ERROR_MESSAGE:
        keep = (MAX_ERROR_MESSAGE - 1) // 2
        args["error_message"] = f"{message[:keep]}…{message[-keep:]}"
    return cls(**args)


@cache
def _names_in_any_version(api_key: int, response: bool, cls_name: str) -> frozenset[str]:
    """Every field name the class ``cls_name`` has in some version of the API.

    Read from the source of kio's generated modules (``_declared_fields``) rather than by
    importing every version: importing is what costs (a dataclass built per class), and a broker
    pays it at its first request of each API (issue 19, start-up time)."""
    names: set[str] = set()
    entity = EntityType.response if response else EntityType.request
    for version, paths in schema_name_map[api_key_map[api_key]].items():
        module_name = paths[entity].partition(":")[0]
        declared = _declared_fields(module_name)
        if declared is None:  # no source to read: import it
            classes = apis.message_module_classes(api_key, version, response)
            declared = {n: field_names(c) for n, c in classes.items()}
        names |= declared.get(cls_name, frozenset())
    return frozenset(names)


def _declared_fields(module_name: str) -> dict[str, frozenset[str]] | None:
    """Class name -> its annotated field names (``ClassVar`` dunders excluded), from the module's
    source without importing it; None when the source is not available."""
    import ast
    import pathlib

    import kio.schema

    # not importlib.util.find_spec: it imports the parent package, whose __init__ imports the module
    package, _, rest = module_name.partition("kio.schema.")
    if package or not rest:
        return None
    path = pathlib.Path(kio.schema.__file__).parent.joinpath(*rest.split(".")).with_suffix(".py")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError):
        return None
    return {
        node.name: frozenset(
            st.target.id for st in node.body
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and not st.target.id.startswith("__")
        )
        for node in tree.body if isinstance(node, ast.ClassDef)
    }


class Builder:
    """``Builder(api_key, version).SomeClass(**fields)`` -> an instance of that version's class.

    Fields the version lacks are dropped; a field no version has raises TypeError (a typo)."""

    __slots__ = ("_api_key", "_classes", "_response")

    def __init__(self, api_key: int, version: int, *, response: bool = True) -> None:
        self._api_key = api_key
        self._response = response
        self._classes = apis.message_module_classes(api_key, version, response)

    def __getattr__(self, name: str) -> Any:
        cls = self._classes[name]
        api_key, response = self._api_key, self._response

        def build(**kw: Any) -> Any:
            dropped = set(kw) - field_names(cls)
            # Every version's module is imported only when a field is dropped: a broker's first
            # requests (at the newest versions) stay free of that start-up cost.
            unknown = dropped - _names_in_any_version(api_key, response, name) if dropped else dropped
            if unknown:
                raise TypeError(f"{name} has no field {', '.join(sorted(unknown))} in any version")
            return make(cls, **kw)

        return build

    def has_class(self, cls_name: str) -> bool:
        return cls_name in self._classes

    def has(self, cls_name: str, field_name: str) -> bool:
        return field_name in field_names(self._classes[cls_name])


_ZERO_BY_TYPE: dict[str, Any] = {
    "int8": 0, "int16": 0, "int32": 0, "int64": -1, "uint16": 0, "uint32": 0, "uint64": 0, "float64": 0.0,
    "string": "", "bytes": b"", "records": b"", "bool": False, "uuid": uuid.UUID(int=0),
    "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
    "error_code": ErrorCode.none, "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.timezone.utc),
}


def error_response(api_key: int, version: int, code: ErrorCode) -> Any:
    """A response of the given API version carrying ``code`` in its top-level error field (when
    it has one) and empty collections elsewhere."""
    return _empty(apis.message_class(api_key, version, True), code)


def _empty(cls: type, code: ErrorCode) -> Any:
    kw: dict[str, Any] = {}
    for k in field_kinds(cls):
        if k.default is not MISSING and k.name != "error_code":
            continue
        if k.array:
            kw[k.name] = ()
        elif k.entity is not None:
            kw[k.name] = None if k.nullable else _empty(k.entity, code)
        elif k.name == "error_code":
            kw[k.name] = code
        elif k.nullable:
            kw[k.name] = None
        else:
            kw[k.name] = _ZERO_BY_TYPE.get(k.kafka_type, 0)
    return cls(**kw)
