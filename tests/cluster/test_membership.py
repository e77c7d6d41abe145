"""Broker membership (cluster/membership.py, issue 15) against a real PostgreSQL: registration,
duplicate node ids refused, heartbeats keep a session alive, expiry on the database's clock.
Every wait is bounded in count and time."""

from __future__ import annotations

import time

import pytest

from cluster_store import session, wait_until
from oncelog.clock import ManualClock
from oncelog.cluster.errors import BrokerNotRegistered, BrokerSessionExpired, DuplicateBrokerRegistration
from oncelog.cluster.membership import SessionConfig, forget, live_brokers, registered_brokers
from oncelog.protocol.errors import ErrorCode, InvalidConfig


def live_ids(conn) -> set[int]:
    return {b.node_id for b in live_brokers(conn)}


def test_registration_makes_a_live_broker_with_a_growing_broker_epoch(store) -> None:
    one, two = session(store.dsn, 1, rack="r1"), session(store.dsn, 2)
    e1 = one.register()
    e2 = two.register()
    assert e2 > e1
    (b1, b2) = live_brokers(store.conn)
    assert (b1.node_id, b1.host, b1.port, b1.rack, b1.broker_epoch, b1.live) == (1, "127.0.0.1", 9001, "r1", e1, True)
    assert (b2.node_id, b2.rack, b2.broker_epoch) == (2, None, e2)
    # the same process registering again (a retry after a lost answer) is allowed: a new epoch
    assert one.register() > e2
    one.deregister()
    assert live_ids(store.conn) == {2}
    assert [b.node_id for b in registered_brokers(store.conn)] == [1, 2]  # the row stays
    assert not forget(store.conn, 2)  # live: not forgotten
    assert forget(store.conn, 1)
    assert [b.node_id for b in registered_brokers(store.conn)] == [2]


def test_a_second_process_with_a_live_node_id_is_refused_until_the_session_expires(store) -> None:
    first, second = session(store.dsn, 1, timeout_ms=1_000), session(store.dsn, 1, timeout_ms=1_000)
    first.register()
    with pytest.raises(DuplicateBrokerRegistration) as refused:
        second.register()
    assert refused.value.code == ErrorCode.duplicate_broker_registration
    assert str(first.incarnation) in str(refused.value)
    first.heartbeat()  # still the holder
    # first stops heartbeating (paused, cut off): once its session expired, second may register
    waited = wait_until(lambda: not live_ids(store.conn), what="expiry of node 1's session")
    assert waited < 5
    second.register()
    assert live_ids(store.conn) == {1}
    with pytest.raises(BrokerSessionExpired) as stale:  # the old process learns it was replaced
        first.heartbeat()
    assert stale.value.code == ErrorCode.stale_broker_epoch
    assert not first.holds_lease()
    second.heartbeat()


def test_heartbeats_keep_a_session_alive_and_it_expires_after_the_timeout(store) -> None:
    one = session(store.dsn, 1, timeout_ms=1_500)  # 0.2 s between heartbeats leaves 1.3 s for a loaded machine
    with pytest.raises(BrokerNotRegistered):
        one.heartbeat()
    one.register()
    start = time.monotonic()
    for _ in range(100):  # 4 s of heartbeats every 0.2 s: alive throughout, well past the timeout
        if time.monotonic() - start > 4:
            break
        one.heartbeat()
        assert live_ids(store.conn) == {1}
        time.sleep(0.2)
    assert time.monotonic() - start > 4
    stopped = time.monotonic()
    wait_until(lambda: not live_ids(store.conn), what="expiry")
    assert 0.5 < time.monotonic() - stopped < 8  # the timeout (1.5 s) after the last heartbeat, on the database's clock
    with pytest.raises(BrokerSessionExpired):
        one.heartbeat()  # a heartbeat never revives an ended session
    assert live_ids(store.conn) == set()
    one.register()  # a new session
    assert live_ids(store.conn) == {1}


def test_holds_lease_is_the_brokers_conservative_view_on_its_own_clock(store) -> None:
    clock = ManualClock()
    one = session(store.dsn, 1, timeout_ms=9_000, clock=clock)
    assert not one.holds_lease()
    one.register()
    clock.advance(8_999)
    assert one.holds_lease()
    clock.advance(1)
    assert not one.holds_lease()  # the store may still think it live: the broker stops first
    one.heartbeat()
    assert one.holds_lease()
    one.deregister()
    assert not one.holds_lease()
    one.deregister()  # idempotent


def test_settings_have_kafkas_names_and_defaults() -> None:
    from oncelog.broker.configuration.config import BrokerConfig

    assert SessionConfig.from_properties({}) == SessionConfig(9_000, 2_000)
    cfg = BrokerConfig().with_overrides({"broker.session.timeout.ms": "1000", "broker.heartbeat.interval.ms": "100"})
    assert SessionConfig(cfg.broker_session_timeout_ms, cfg.broker_heartbeat_interval_ms) == SessionConfig(1_000, 100)
    assert (BrokerConfig().broker_session_timeout_ms, BrokerConfig().broker_heartbeat_interval_ms) == (9_000, 2_000)
    assert SessionConfig.from_properties({"broker.session.timeout.ms": "1000", "broker.heartbeat.interval.ms": "100"}) \
        == SessionConfig(1_000, 100)
    with pytest.raises(InvalidConfig):
        SessionConfig.from_properties({"broker.session.timeout.ms": "1000", "broker.heartbeat.interval.ms": "1000"})
    with pytest.raises(InvalidConfig):
        SessionConfig.from_properties({"broker.session.timeout.ms": "soon"})


def test_two_processes_registering_one_node_id_at_once_one_wins(store) -> None:
    import threading

    for _round in range(5):
        contenders = [session(store.dsn, 7) for _ in range(2)]
        outcome: list = []
        go = threading.Barrier(2, timeout=30)

        def run(s) -> None:
            go.wait()
            try:
                outcome.append(s.register())
            except DuplicateBrokerRegistration as exc:
                outcome.append(exc)

        threads = [threading.Thread(target=run, args=(s,)) for s in contenders]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(type(o).__name__ for o in outcome) == ["DuplicateBrokerRegistration", "int"]
        winner = next(s for s in contenders if s.broker_epoch is not None)
        winner.deregister()
