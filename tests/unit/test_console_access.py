"""The console's login, sessions and per-principal view (console/access.py), its cookie parsing
(console/server.py), and the charts' bounded history (broker/observability/history.py). Pure:
clocks are injected."""

from __future__ import annotations

import pytest

from oncelog.broker.auth.credentials import derive, salted_password
from oncelog.broker.observability.history import MAX_POINTS, History, group_lags
from oncelog.broker.observability.observe import BrokerState, GroupRow, PartitionRow, SharePartitionRow
from oncelog.console import access
from oncelog.console.access import Decisions, PasswordGate, Sessions, check_password, visible_state
from oncelog.console.server import session_token


def test_sessions_are_bounded_expire_and_keep_no_token() -> None:
    now = [0.0]
    s = Sessions(clock=lambda: now[0], max_sessions=3, idle_s=10, lifetime_s=100)
    tokens = [s.create(f"u{i}", b"fp") for i in range(3)]
    assert len({len(t) for t in tokens}) == 1 and len(tokens[0]) >= 43  # 256 random bits
    assert all(t not in str(s._table) for t in tokens)  # only their digests are kept
    assert s.get(tokens[0]).principal == "User:u0"  # used: now the most recent
    t3 = s.create("u3", b"fp")  # the table is full: the least recently used (u1) goes
    assert len(s) == 3 and s.get(tokens[1]) is None and s.get(tokens[0]) is not None and s.get(t3) is not None
    now[0] = 9
    assert s.get(t3) is not None
    now[0] = 20  # t3 was used at 9: idle 11 s > 10
    assert s.get(t3) is None
    keep = s.create("k", b"fp")
    for t in range(25, 101, 5):  # used every 5 s, but not past its lifetime
        now[0] = t
        assert s.get(keep) is not None
    now[0] = 121
    assert s.get(keep) is None
    s.drop(keep)
    assert s.get(None) is None and s.get("x" * 500) is None


def test_password_check_is_scrams_stored_key() -> None:
    salt, iterations = b"0123456789abcdef", 4096
    cred = derive("SCRAM-SHA-256", salt, salted_password("SCRAM-SHA-256", "secret", salt, iterations), iterations)
    assert check_password(salt, iterations, cred.stored_key, "sha256", "secret")
    assert not check_password(salt, iterations, cred.stored_key, "sha256", "Secret")


def test_failed_logins_are_limited_per_address() -> None:
    now = [0.0]
    g = PasswordGate(clock=lambda: now[0])
    for _ in range(access.MAX_FAILURES):
        assert not g.refused("10.0.0.1")
        g.failed("10.0.0.1")
    assert g.refused("10.0.0.1") and not g.refused("10.0.0.2")
    now[0] = access.FAILURE_WINDOW_S + 1
    assert not g.refused("10.0.0.1")
    for i in range(access.MAX_FAILURE_HOSTS + 50):  # the table stays bounded
        g.failed(f"h{i}")
    assert len(g._failures) <= access.MAX_FAILURE_HOSTS


@pytest.mark.parametrize("header,token", [
    (None, None), ("", None), ("oncelog_console=abc", "abc"), ("a=1; oncelog_console=xyz; b=2", "xyz"),
    ("oncelog_console=", None), ("other=abc", None), ("x" * 9000, None),
])
def test_session_cookie_is_read_from_the_cookie_header(header: str | None, token: str | None) -> None:
    assert session_token(header) == token


def _doc() -> dict:
    return {
        "topics": [{"name": "a", "groups": [{"group_id": "g", "lag": 1}, {"group_id": "h", "lag": 2}]},
                   {"name": "secret", "groups": []}],
        "partitions": [{"topic": "a"}, {"topic": "secret"}],
        "leaders": [{"topic": "a"}, {"topic": "secret"}],
        "groups": [{"group_id": "g", "offsets": [{"topic": "a", "lag": 1}, {"topic": "secret", "lag": 5}],
                    "members": [{"assignment": ["a-0", "secret-0"]}], "lag": 6},
                   {"group_id": "h", "offsets": [], "members": [], "lag": 0}],
        "transactions": [{"transactional_id": "t1", "partitions": ["a-0", "secret-1"]},
                         {"transactional_id": "t2", "partitions": []}],
        "hanging": {"checked_ms": 1, "error": None, "items": [{"topic": "a", "transactional_id": "t2"},
                                                               {"topic": "secret", "transactional_id": "t1"}]},
        "diskless": {"objects": 3}, "brokers": [1],
    }


def test_a_principal_sees_only_what_its_acls_let_it_describe() -> None:
    doc = _doc()
    d = Decisions(topics=frozenset({"a"}), groups=frozenset({"g"}), transactional_ids=frozenset({"t1"}))
    v = visible_state(doc, d)
    assert [t["name"] for t in v["topics"]] == ["a"] and v["topics"][0]["groups"] == [{"group_id": "g", "lag": 1}]
    assert v["partitions"] == [{"topic": "a"}] and v["leaders"] == [{"topic": "a"}]
    (g,) = v["groups"]
    assert g["offsets"] == [{"topic": "a", "lag": 1}] and g["lag"] == 1 and g["members"][0]["assignment"] == ["a-0"]
    assert v["transactions"] == [{"transactional_id": "t1", "partitions": ["a-0"]}]
    assert v["hanging"]["items"] == [{"topic": "a", "transactional_id": None, "transactional_id_hidden": True}]
    assert v["diskless"] is None and v["brokers"] == [1]
    assert doc == _doc()  # the shared document is never changed
    assert visible_state(doc, Decisions(everything=True)) is doc
    assert visible_state(doc, Decisions(cluster=True))["diskless"] == {"objects": 3}


def test_history_rates_lags_and_its_bounds() -> None:
    h = History(interval_s=10, horizon_s=40, max_series=2)  # 4 points
    h.baseline(0)
    h.add(10_000, {"a": (1000, 10)}, {"a": 500}, {"g": ("consumer", 7)})
    h.add(20_000, {"a": (3000, 30), "b": (10, 1), "c": (5, 5)}, {"a": 500}, {"g": ("consumer", 3), "s": ("share", 2)})
    doc = h.series()
    assert doc["times_ms"] == [10_000, 20_000]
    assert doc["series"]["produce_bytes"] == {"a": [100.0, 200.0], "b": [None, 1.0]}  # "c": a third series, not kept
    assert doc["series"]["produce_records"]["a"] == [1.0, 2.0]
    assert doc["series"]["fetch_bytes"] == {"a": [50.0, 0.0]}
    assert doc["series"]["group_lag"] == {"g": [7.0, 3.0], "s": [None, 2.0]}
    assert doc["group_types"] == {"g": "consumer", "s": "share"} and doc["dropped"]["produce_bytes"] == 1
    h.add(30_000, {"a": (10, 1)}, {}, {})  # a counter went backwards (a restart): no rate, not a negative one
    assert h.series()["series"]["produce_bytes"]["a"][-1] is None
    for t in range(4, 9):
        h.add(t * 10_000, {}, {}, {})
    doc = h.series()
    assert len(doc["times_ms"]) == 4 and doc["times_ms"][-1] == 80_000  # the ring keeps the horizon only
    assert doc["series"] == {"produce_bytes": {}, "produce_records": {}, "fetch_bytes": {}, "group_lag": {}}
    assert History(interval_s=0.001).points == MAX_POINTS  # however short the interval


def test_group_lags_from_a_snapshot() -> None:
    snap = BrokerState(partitions=[PartitionRow("t", 0, 0, 10, 10, 0, 0, 0), PartitionRow("t", 1, 0, 5, 5, 0, 0, 0)],
                       groups=[GroupRow("c", "Stable", "consumer", "", 1, (), "consumer"), GroupRow("s", "Stable", "share", "", 1, (), "share")],
                       committed=[("c", "t", 0, 4), ("c", "t", 1, 5), ("c", "elsewhere", 0, 1), ("old", "t", 0, 9)],
                       share_partitions=[SharePartitionRow("s", "t", 0, 6, 8, 2, 1, 0, 0)])
    assert group_lags(snap) == {"c": ("consumer", 6), "s": ("share", 4), "old": ("classic", 1)}
