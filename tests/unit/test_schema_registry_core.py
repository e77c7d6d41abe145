"""The schema registry's pure core (oncelog/schema_registry): the record walk's schema-id
prefixes against a plain oracle (hypothesis), the state replayed from ``_schemas`` records, the
planner's Confluent rules (ids by content, versions, compatibility levels, deletes, modes,
watermark), the three formats' parsing and compatibility, reference resolution (cycles, depth)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol import _recordwalk
from oncelog.protocol import records as R
from oncelog.schema_registry import errors, planner
from oncelog.schema_registry import records as rec
from oncelog.schema_registry.formats import Reference, parse
from oncelog.schema_registry.state import MAX_REFERENCE_DEPTH, RegistryState, replay

# -- the walk's schema ids -----------------------------------------------------------------------


def _oracle_ids(datas: list[bytes | None]) -> tuple[int, ...]:
    seen: dict[int, int] = {}
    for i, d in enumerate(datas):
        sid = -1 if d is None else -2 if len(d) < 5 or d[0] != 0 else int.from_bytes(d[1:5], "big")
        seen.setdefault(sid, i)
    return tuple(x for sid, i in seen.items() for x in (sid, i)) if len(seen) <= 64 else None  # type: ignore[return-value]


_framed = st.builds(lambda sid, rest: b"\x00" + sid.to_bytes(4, "big") + rest,
                    st.sampled_from([0, 1, 7, 2**31 - 1, 2**32 - 1]), st.binary(max_size=6))
_data = st.one_of(st.none(), _framed, st.binary(max_size=8))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_data, _data), min_size=1, max_size=30))
def test_walk_collects_the_distinct_schema_ids_of_keys_and_values(recs: list[tuple[bytes | None, bytes | None]]) -> None:
    batch = R.build_batch([(k, v, ()) for k, v in recs], timestamp_ms=1)
    h = R.parse_header(batch)
    walked = _recordwalk.walk(batch[61:], h.records_count, h.base_timestamp, 3)
    assert walked[7] == _oracle_ids([k for k, _ in recs])
    assert walked[8] == _oracle_ids([v for _, v in recs])
    assert _recordwalk.walk(batch[61:], h.records_count, h.base_timestamp, 2)[7] is None
    assert len(_recordwalk.walk(batch[61:], h.records_count, h.base_timestamp)) == 7  # unchanged when not asked


def test_more_distinct_ids_than_the_walker_keeps_are_checked_record_by_record() -> None:
    values = [b"\x00" + i.to_bytes(4, "big") for i in range(100)]
    batch = R.build_batch([(None, v, ()) for v in values], timestamp_ms=1)
    rule = R.SchemaIdRule(None, frozenset(range(99)), "", "t-value")
    with pytest.raises(R.SchemaIdErrors) as refused:
        R.validate_produce_batch(batch, 1 << 20, schema_ids=rule)
    assert [i for i, _ in refused.value.record_errors] == [99] and refused.value.unknown == {99}
    R.validate_produce_batch(batch, 1 << 20, schema_ids=R.SchemaIdRule(None, frozenset(range(100))))


def test_compressed_batches_and_null_values_and_keys() -> None:
    batch = R.build_batch([(b"\x00\x00\x00\x00\x05k", None, ()), (None, b"\x00\x00\x00\x00\x06v", ())],
                          timestamp_ms=1, compression=R.COMPRESSION_ZSTD)
    R.validate_produce_batch(batch, 1 << 20, schema_ids=R.SchemaIdRule(frozenset({5}), frozenset({6})))
    with pytest.raises(R.SchemaIdErrors) as refused:
        R.validate_produce_batch(batch, 1 << 20, schema_ids=R.SchemaIdRule(frozenset({6}), None, "t-key"))
    assert refused.value.record_errors == [(0, "Schema id 5 of the key is not registered under subject t-key")]


# -- state and planner ---------------------------------------------------------------------------

AVRO_A = '{"type":"record","name":"A","fields":[{"name":"x","type":"int"}]}'
AVRO_A2 = '{"type":"record","name":"A","fields":[{"name":"x","type":"int"},{"name":"y","type":"int"}]}'
AVRO_A2_DEFAULT = ('{"type":"record","name":"A","fields":[{"name":"x","type":"int"},'
                   '{"name":"y","type":"int","default":0}]}')


class Log:
    """The records a registry would have appended, replayed into a state."""

    def __init__(self, level: str = "BACKWARD") -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.state = RegistryState(level)

    def do(self, plan: planner.Plan):  # type: ignore[no-untyped-def]
        for k, v in plan.records:
            self.records.append((k, v))
            self.state.apply_raw(k, v)
        return plan.answer

    def register(self, subject: str, schema: str, kind: str = "AVRO", refs=()):  # type: ignore[no-untyped-def]
        body = {"schema": schema, "schemaType": kind, "references": [r.to_json() for r in refs]}
        return self.do(planner.register(self.state, subject, planner.schema_request(body)))


def test_ids_by_content_versions_and_replay() -> None:
    log = Log()
    a = log.register("s-value", AVRO_A)
    assert a == {"id": 1, "version": 1}
    assert log.register("s-value", AVRO_A.replace(",", ", ")) == a  # whitespace: the same schema
    assert log.register("t-value", AVRO_A) == {"id": 1, "version": 1}  # another subject: the same id
    with pytest.raises(errors.RegistryError) as refused:
        log.register("s-value", AVRO_A2)
    assert refused.value.code == 409 and refused.value.status == 409
    assert log.register("s-value", AVRO_A2_DEFAULT) == {"id": 2, "version": 2}
    again = replay(log.records)
    assert again.subject_names() == ["s-value", "t-value"] and again.max_id == 2
    assert again.live_ids == {"s-value": frozenset({1, 2}), "t-value": frozenset({1})}


@pytest.mark.parametrize("level, new, ok", [
    ("BACKWARD", AVRO_A2, False), ("BACKWARD", AVRO_A2_DEFAULT, True), ("FORWARD", AVRO_A2, True),
    ("FULL", AVRO_A2, False), ("FULL", AVRO_A2_DEFAULT, True), ("NONE", '"string"', True),
    ("BACKWARD", '"string"', False)])
def test_levels(level: str, new: str, ok: bool) -> None:
    log = Log(level)
    log.register("s", AVRO_A)
    if ok:
        log.register("s", new)
    else:
        with pytest.raises(errors.RegistryError, match="incompatible"):
            log.register("s", new)


def test_transitive_levels_check_every_live_version() -> None:
    log = Log("NONE")
    log.register("s", '{"type":"record","name":"A","fields":[{"name":"x","type":"int"}]}')
    log.register("s", '{"type":"record","name":"A","fields":[{"name":"x","type":"int","default":1}]}')
    newer = '{"type":"record","name":"A","fields":[{"name":"x","type":"int","default":1},{"name":"z","type":"long"}]}'
    log.do(planner.set_config(log.state, "s", {"compatibility": "FORWARD"}))
    log.register("s", newer.replace('"z"', '"w"'))  # the latest version can read it
    log.do(planner.set_config(log.state, "s", {"compatibility": "BACKWARD_TRANSITIVE"}))
    with pytest.raises(errors.RegistryError, match="409|incompatible"):
        log.register("s", newer)


def test_deletes_and_the_watermark_never_reuse_an_id() -> None:
    log = Log()
    log.register("a", AVRO_A)
    log.register("b", '"string"')
    with pytest.raises(errors.RegistryError) as e:
        log.do(planner.delete_subject(log.state, "b", permanent=True))
    assert e.value.code == 40405
    assert log.do(planner.delete_subject(log.state, "b", permanent=False)) == [1]
    with pytest.raises(errors.RegistryError) as e:
        log.do(planner.delete_subject(log.state, "b", permanent=False))
    assert e.value.code == 40404
    assert log.do(planner.delete_subject(log.state, "b", permanent=True)) == [1]
    assert (rec.watermark_key(), rec.watermark_value(2)) in log.records
    # compaction keeps only the last record of each key and drops tombstones: the id stays used
    last: dict[bytes, bytes | None] = {}
    for k, v in log.records:
        last[k] = v
    compacted = [(k, v) for k, v in last.items() if v is not None]
    state = replay(compacted)
    assert state.max_id == 2 and 2 not in state.by_id
    log2 = Log()
    for k, v in compacted:
        log2.do(planner.Plan([(k, v)], None))
    assert log2.register("b", '"string"')["id"] == 3


def test_modes_and_configs() -> None:
    log = Log()
    log.do(planner.set_mode(log.state, None, {"mode": "READONLY"}))
    with pytest.raises(errors.RegistryError) as e:
        log.register("s", AVRO_A)
    assert e.value.code == 42205
    log.do(planner.set_mode(log.state, None, {"mode": "READWRITE"}))
    log.register("s", AVRO_A)
    with pytest.raises(errors.RegistryError) as e:
        log.do(planner.set_mode(log.state, None, {"mode": "IMPORT"}))
    assert e.value.code == 42205
    with pytest.raises(errors.RegistryError) as e:
        planner.set_config(log.state, None, {"compatibility": "NOPE"})
    assert e.value.code == 42203
    with pytest.raises(errors.RegistryError) as e:
        planner.delete_config(log.state, "s")
    assert e.value.code == 40408


def test_garbage_records_are_skipped() -> None:
    log = Log()
    log.register("s", AVRO_A)
    garbage = [(b"not json", b"x"), (None, b"{}"), (b'{"keytype":"SCHEMA"}', b"[]"),
               (rec.schema_key("s", 2), json.dumps({"subject": "s", "version": 2, "id": 1, "schema": '"string"'}).encode()),
               (b'{"keytype":"NOOP","magic":0}', None)]
    state = replay(log.records + garbage)
    assert [e.version for e in state.versions("s")] == [1]  # id 1 is one content for ever


# -- references ----------------------------------------------------------------------------------


def test_avro_references_resolve_and_cycles_and_depth_are_refused() -> None:
    log = Log()
    log.register("ref", '{"type":"record","name":"Ref","namespace":"x","fields":[{"name":"a","type":"int"}]}')
    user = '{"type":"record","name":"U","fields":[{"name":"r","type":"x.Ref"}]}'
    assert log.register("u", user, refs=[Reference("x.Ref", "ref", 1)])["id"] == 2
    with pytest.raises(errors.RegistryError) as e:
        log.register("u2", user)  # the reference is missing
    assert e.value.code == 42201
    with pytest.raises(errors.RegistryError) as e:
        log.register("u3", user, refs=[Reference("x.Ref", "nowhere", 1)])
    assert e.value.code == 42201
    # a cycle can only be written into _schemas by hand: resolving it is refused, not a recursion
    cyc = [(rec.schema_key(s, 1), json.dumps({"subject": s, "version": 1, "id": i, "schema": '"string"',
                                             "references": [{"name": o, "subject": o, "version": 1}]}).encode())
           for s, o, i in (("p", "q", 10), ("q", "p", 11))]
    state = replay(cyc)
    with pytest.raises(errors.RegistryError, match="cycle"):
        state.resolve([Reference("p", "p", 1)])
    chain = [(rec.schema_key(f"c{i}", 1), json.dumps({
        "subject": f"c{i}", "version": 1, "id": 100 + i, "schema": '"string"',
        "references": [{"name": f"c{i + 1}", "subject": f"c{i + 1}", "version": 1}] if i < 40 else []}).encode())
        for i in range(41)]
    with pytest.raises(errors.RegistryError, match="deep"):
        replay(chain).resolve([Reference("c0", "c0", 1)])
    assert MAX_REFERENCE_DEPTH < 40


# -- formats ---------------------------------------------------------------------------------------


def test_deep_nesting_is_refused_before_the_libraries_see_it() -> None:
    for kind in ("AVRO", "JSON"):
        with pytest.raises(errors.RegistryError, match="nested"):
            parse(kind, "[" * 100_000 + "]" * 100_000)
    deep = {"type": "object"}
    for _ in range(300):
        deep = {"type": "object", "properties": {"x": deep}}
    with pytest.raises(errors.RegistryError, match="nested"):
        parse("JSON", json.dumps(deep))


def test_json_schema_compatibility() -> None:
    closed = parse("JSON", '{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}')
    wider = parse("JSON", '{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"string"}},'
                          '"additionalProperties":false}')
    assert wider.incompatibilities(closed) == []  # the new one reads what the old wrote
    assert any("TYPE_NARROWED" in m or "PROPERTY_REMOVED" in m for m in closed.incompatibilities(wider))
    with pytest.raises(errors.RegistryError):
        parse("JSON", '{"type": 12}')
    with pytest.raises(errors.RegistryError):
        parse("JSON", '"a string is no schema"')


def test_protobuf_text_and_descriptor_are_one_schema() -> None:
    from oncelog.schema_registry.formats.protobuf_format import serialized

    text = 'syntax = "proto3";\npackage p;\nmessage M { string a = 1; int32 b = 2; }\n'
    a = parse("PROTOBUF", text)
    b = parse("PROTOBUF", serialized(a.canonical))
    assert a.canonical == b.canonical and "message M {" in a.canonical
    changed = parse("PROTOBUF", text.replace("int32 b", "string b"))
    assert any("FIELD_SCALAR_KIND_CHANGED" in m for m in changed.incompatibilities(a))
    assert parse("PROTOBUF", text.replace("int32 b", "int64 b")).incompatibilities(a) == []
    with pytest.raises(errors.RegistryError) as e:
        parse("PROTOBUF", 'syntax = "proto3"; message M { strin a = 1; }')
    assert e.value.code == 42201 and "strin" in e.value.message


def test_protobuf_and_json_references() -> None:
    log = Log()
    log.register("dep.proto", 'syntax = "proto3";\npackage d;\nmessage Dep { string x = 1; }\n', "PROTOBUF")
    main = 'syntax = "proto3";\npackage m;\nimport "dep.proto";\nmessage Main { d.Dep dep = 1; }\n'
    got = log.register("main-value", main, "PROTOBUF", refs=[Reference("dep.proto", "dep.proto", 1)])
    assert got["version"] == 1
    from oncelog.schema_registry.formats.protobuf_format import serialized

    e1 = log.state.version("main-value", 1)  # served as a descriptor: compiled with its import
    again = parse("PROTOBUF", serialized(e1.schema, log.state.resolve(e1.references)), log.state.resolve(e1.references))
    assert again.canonical == e1.schema
    with pytest.raises(errors.RegistryError) as e:
        log.register("main2-value", main, "PROTOBUF")  # the import is not a reference
    assert e.value.code == 42201
    log.register("address.json", '{"type":"object","properties":{"city":{"type":"string"}}}', "JSON")
    person = '{"type":"object","properties":{"home":{"$ref":"address.json"}}}'
    first = log.register("person-value", person, "JSON", refs=[Reference("address.json", "address.json", 1)])
    narrower = '{"type":"object","properties":{"home":{"$ref":"address.json"},"age":{"type":"integer"}}}'
    with pytest.raises(errors.RegistryError) as e:  # BACKWARD: a property added to an open content model
        log.register("person-value", narrower, "JSON", refs=[Reference("address.json", "address.json", 1)])
    assert e.value.code == 409
    assert first["id"] != got["id"]
