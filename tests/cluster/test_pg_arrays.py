"""Array parameters built in PostgreSQL's binary format (cluster/pg_arrays.py), against a real
PostgreSQL: whatever the values, the server reads back exactly the list that was encoded, for
every element type the group commit sends (plain and prepared statements; empty arrays; the
types' extremes); a value out of its type's range is an error, never a wrong number."""

from __future__ import annotations

import struct

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.cluster import pg_arrays

VALUES = {
    "int8": st.integers(-2**63, 2**63 - 1),
    "int4": st.integers(-2**31, 2**31 - 1),
    "int2": st.integers(-2**15, 2**15 - 1),
    "bool": st.booleans(),
    "bytea": st.binary(max_size=300),
}


@pytest.fixture(scope="module")
def conn(pg_server):
    name = "pg_arrays_module"
    dsn = pg_server.create_database(name)
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c
    pg_server.drop_database(name)


def _read_back(conn: psycopg.Connection, element_type: str, values: list, prepare: bool) -> list:
    (got,) = conn.execute(f"SELECT %b::{element_type}[]", [pg_arrays.encode(element_type, values)],
                          prepare=prepare).fetchone()
    return got


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), element_type=st.sampled_from(sorted(VALUES)), prepare=st.booleans())
def test_what_is_encoded_is_what_the_server_reads(conn, data, element_type: str, prepare: bool) -> None:
    values = data.draw(st.lists(VALUES[element_type], max_size=40))
    assert _read_back(conn, element_type, values, prepare) == values


@pytest.mark.parametrize("element_type, values", [
    ("int8", [-2**63, 2**63 - 1, 0]), ("int4", [-2**31, 2**31 - 1]), ("int2", [-2**15, 2**15 - 1]),
    ("bool", [True, False]), ("bytea", [b"", bytearray(b"ab"), memoryview(b"\x00" * 5000)]),
    ("int8", []), ("bytea", []), ("bool", []),
])
def test_extremes_empty_arrays_and_buffers(conn, element_type: str, values: list) -> None:
    expect = [bytes(v) for v in values] if element_type == "bytea" else values
    assert _read_back(conn, element_type, values, False) == expect
    assert _read_back(conn, element_type, iter(values), True) == expect  # any iterable


@pytest.mark.parametrize("element_type, value", [("int2", 2**15), ("int4", -2**31 - 1), ("int8", 2**63)])
def test_a_value_out_of_range_is_an_error(element_type: str, value: int) -> None:
    with pytest.raises(struct.error):
        pg_arrays.encode(element_type, [1, value])


def test_an_unknown_element_type_has_no_encoder() -> None:
    assert pg_arrays.encoder_for("text") is None
    with pytest.raises(KeyError):
        pg_arrays.encode("text", ["a"])
