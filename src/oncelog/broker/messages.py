"""Version-agnostic construction of kio response messages.

kio generates one class per API version. A handler serves every version we advertise by asking
for the classes of the request's version and passing all fields it knows; fields the version
does not have are dropped (``make``). ``error_response`` builds a whole-request error answer for
any API, as Kafka's ``AbstractRequest.getErrorResponse`` does.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode


@cache
def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


_NO_THROTTLE = datetime.timedelta(0)


def make(cls: type, **kw: Any) -> Any:
    """Instantiate ``cls`` with the keyword arguments it has fields for (others are dropped).

    ``throttle_time`` defaults to zero: this broker does not throttle (no quotas yet)."""
    names = field_names(cls)
    args = {k: v for k, v in kw.items() if k in names}
    if "throttle_time" in names and "throttle_time" not in args:
        args["throttle_time"] = _NO_THROTTLE
    return cls(**args)


class Builder:
    """``Builder(api_key, version).SomeClass(**fields)`` -> an instance of that version's class."""

    __slots__ = ("_classes",)

    def __init__(self, api_key: int, version: int) -> None:
        self._classes = apis.message_module_classes(api_key, version, True)

    def __getattr__(self, name: str) -> Any:
        cls = self._classes[name]
        return lambda **kw: make(cls, **kw)

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
    for f in fields(cls):
        if f.default is not MISSING or f.default_factory is not MISSING:  # type: ignore[misc]
            if f.name != "error_code":
                continue
        kind = classify_field(f)
        if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
            kw[f.name] = ()
        elif isinstance(kind, EntityField):
            kw[f.name] = None if is_optional(f) else _empty(kind.type_, code)
        elif f.name == "error_code":
            kw[f.name] = code
        elif is_optional(f):
            kw[f.name] = None
        else:
            kw[f.name] = _ZERO_BY_TYPE.get(f.metadata.get("kafka_type", ""), 0)
    return cls(**kw)
