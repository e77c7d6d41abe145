"""Registry-framed Avro as typed columns: Spark's ``from_avro`` / ``to_avro`` for the Confluent
wire format (magic byte 0, 4-byte schema id, Avro binary), against the schema registry the
broker serves (or any Confluent-compatible one). docs/SPARK.md "Avro with the schema registry".

    from oncelog.spark.avro import from_confluent_avro, to_confluent_avro

    users = (spark.read.format("oncelog").option("subscribe", "users").options(**kafka).load()
             .select(from_confluent_avro("value", registry, reader_schema).alias("u")).select("u.*"))
    out = users.select(to_confluent_avro(struct(*users.columns), registry, "adults-value", schema).alias("value"))

``from_confluent_avro(column, url, reader_schema)``: each value is decoded with the schema its
id names (fetched from the registry once per id and worker, references included) and resolved
to ``reader_schema`` by Avro's rules (fastavro); the column's type is ``spark_type(reader_schema)``.
A null value is a null struct; a value that is not framed, or whose id the registry does not
know, fails the task with a ValueError naming the id (a pipeline never drops data silently).

``to_confluent_avro(column, url, subject, schema)``: the schema is registered under ``subject``
(or found there, when ``auto_register=False``) once, on the driver, when the column is built;
each row (a struct) is written with that id.

Types (as Spark's own Avro support): null, boolean, int, long, float, double, bytes/fixed
(binary), string/enum (string), record (struct), array, map (string keys), a union of null and
one type (that type, nullable); date, timestamp-millis/-micros, decimal logical types; any
other union is its JSON text (string).

``auth=(user, password)``: HTTP Basic for a registry with logins. fastavro is imported on the
workers only (the `spark` extra).
"""

from __future__ import annotations

import base64
import functools
import io
import json
import threading
import urllib.error
import urllib.request
from typing import Any

#: schema id -> parsed writer schema, per worker process
_WRITERS: dict[tuple[str, int], Any] = {}
_LOCK = threading.Lock()
TIMEOUT_S = 30.0


def _request(url: str, method: str = "GET", body: Any = None, auth: tuple[str, str] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json", "Accept": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
        return json.loads(r.read())


def _named(registry: str, refs: list[dict[str, Any]], auth: tuple[str, str] | None, named: dict[str, Any],
           depth: int = 0) -> None:
    """Parses the referenced schemas (their references first) into ``named``."""
    from fastavro import parse_schema

    if depth > 16:
        raise ValueError("schema references nest more than 16 deep")
    for ref in refs:
        doc = _request(f"{registry}/subjects/{urllib.request.quote(ref['subject'], safe='')}/versions/{ref['version']}",
                       auth=auth)
        _named(registry, doc.get("references") or [], auth, named, depth + 1)
        parse_schema(json.loads(doc["schema"]), named_schemas=named)


def _writer(registry: str, schema_id: int, auth: tuple[str, str] | None) -> Any:
    from fastavro import parse_schema

    key = (registry, schema_id)
    with _LOCK:
        found = _WRITERS.get(key)
    if found is not None:
        return found
    try:
        doc = _request(f"{registry}/schemas/ids/{schema_id}", auth=auth)
    except urllib.error.HTTPError as exc:
        raise ValueError(f"schema id {schema_id}: the registry answered {exc.code}") from None
    if doc.get("schemaType", "AVRO") != "AVRO":
        raise ValueError(f"schema id {schema_id} is a {doc['schemaType']} schema, not Avro")
    named: dict[str, Any] = {}
    _named(registry, doc.get("references") or [], auth, named)
    parsed = parse_schema(json.loads(doc["schema"]), named_schemas=named)
    with _LOCK:
        _WRITERS[key] = parsed
    return parsed


def _convert(value: Any, schema: Any) -> Any:
    """fastavro's decoded value -> what Spark's type for ``schema`` takes."""
    if value is None:
        return None
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null" and not (isinstance(s, dict) and s.get("type") == "null")]
        if len(branches) == 1:
            return _convert(value, branches[0])
        return json.dumps(value, default=str)
    if isinstance(schema, dict):
        t = schema.get("type")
        if t == "record":
            return {f["name"]: _convert(value.get(f["name"]), f["type"]) for f in schema["fields"]}
        if t == "array":
            return [_convert(v, schema["items"]) for v in value]
        if t == "map":
            return {k: _convert(v, schema["values"]) for k, v in value.items()}
        if isinstance(t, (dict, list)):
            return _convert(value, t)
    return value


def _decode(data: bytes | None, registry: str, reader: Any, reader_json: Any, auth: tuple[str, str] | None) -> Any:
    from fastavro import schemaless_reader

    if data is None:
        return None
    data = bytes(data)
    if len(data) < 5 or data[0] != 0:
        raise ValueError("a value that is not registry-framed Avro (magic byte 0 and a 4-byte schema id)")
    schema_id = int.from_bytes(data[1:5], "big")
    writer = _writer(registry, schema_id, auth)
    record = schemaless_reader(io.BytesIO(data[5:]), writer, reader)
    return _convert(record, reader_json)


def _encode(row: Any, schema_id: int, parsed: Any) -> bytes | None:
    from fastavro import schemaless_writer

    if row is None:
        return None
    record = row.asDict(recursive=True) if hasattr(row, "asDict") else row
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    schemaless_writer(out, parsed, record)
    return out.getvalue()


def spark_type(schema: Any) -> Any:
    """The Spark SQL type of an Avro schema (JSON text or parsed JSON)."""
    from pyspark.sql import types as T

    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            pass  # a bare primitive name
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        return spark_type(branches[0]) if len(branches) == 1 else T.StringType()
    if isinstance(schema, dict):
        t = schema.get("type")
        logical = schema.get("logicalType")
        if logical == "date":
            return T.DateType()
        if logical in ("timestamp-millis", "timestamp-micros"):
            return T.TimestampType()
        if logical == "decimal":
            return T.DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
        if t == "record":
            return T.StructType([T.StructField(f["name"], spark_type(f["type"]),
                                               nullable=isinstance(f["type"], list) and "null" in f["type"])
                                 for f in schema["fields"]])
        if t == "array":
            return T.ArrayType(spark_type(schema["items"]))
        if t == "map":
            return T.MapType(T.StringType(), spark_type(schema["values"]))
        if t in ("fixed",):
            return T.BinaryType()
        if t == "enum":
            return T.StringType()
        return spark_type(t)
    primitives = {"null": T.NullType(), "boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(),
                  "float": T.FloatType(), "double": T.DoubleType(), "bytes": T.BinaryType(), "string": T.StringType()}
    if schema in primitives:
        return primitives[schema]
    raise ValueError(f"Avro type {schema!r} has no Spark type here (a named type: give its full definition)")


def from_confluent_avro(column: Any, registry: str, reader_schema: str, *,
                        auth: tuple[str, str] | None = None) -> Any:
    """A column of decoded structs (see the module docstring)."""
    from fastavro import parse_schema
    from pyspark.sql.functions import col, udf

    reader_json = json.loads(reader_schema)
    reader = parse_schema(reader_json)
    fn = functools.partial(_decode, registry=registry.rstrip("/"), reader=reader, reader_json=reader_json, auth=auth)
    decode = udf(fn, spark_type(reader_json))
    return decode(col(column) if isinstance(column, str) else column)


def register(registry: str, subject: str, schema: str, *, auto_register: bool = True,
             auth: tuple[str, str] | None = None) -> int:
    """The id of ``schema`` under ``subject``: registered (or looked up when not ``auto_register``)."""
    path = f"{registry.rstrip('/')}/subjects/{urllib.request.quote(subject, safe='')}"
    if auto_register:
        return int(_request(path + "/versions", "POST", {"schema": schema}, auth)["id"])
    return int(_request(path, "POST", {"schema": schema}, auth)["id"])


def to_confluent_avro(column: Any, registry: str, subject: str, schema: str, *, auto_register: bool = True,
                      auth: tuple[str, str] | None = None) -> Any:
    """A binary column of registry-framed Avro (see the module docstring)."""
    from fastavro import parse_schema
    from pyspark.sql import types as T
    from pyspark.sql.functions import col, udf

    schema_id = register(registry, subject, schema, auto_register=auto_register, auth=auth)
    encode = udf(functools.partial(_encode, schema_id=schema_id, parsed=parse_schema(json.loads(schema))),
                 T.BinaryType())
    return encode(col(column) if isinstance(column, str) else column)
