"""Leader rebalancing in the store (leadership.rebalance, issue 15) against a real PostgreSQL:
3 brokers share a topic and the internal topics evenly; a broker whose session expires loses
its partitions with bumped epochs and gets its preferred ones back when it returns; concurrent
rebalances never conflict; and a deposed leader can never append again (fenced at the store).
Every wait is bounded."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict

import psycopg
import pytest

from cluster_store import Store, session, wait_until
from oncelog.cluster import leadership, topics
from oncelog.cluster.errors import BrokerSessionExpired, LeaderFenced
from oncelog.cluster.membership import live_brokers
from oncelog.protocol import records as R
from oncelog.protocol.errors import ErrorCode, NotLeaderOrFollower, TopicAlreadyExists

INTERNAL = {"__consumer_offsets": 50, "__transaction_state": 50}


def _topics(conn, orders: int = 12) -> None:
    for name, n in INTERNAL.items():
        topics.create(conn, name, n, {"cleanup.policy": "compact"} if name == "__consumer_offsets" else {})
    topics.create(conn, "orders", orders, {"retention.ms": "-1"})


def _leaders(conn) -> dict[tuple[str, int], tuple[int, int]]:
    return {(r.topic, r.partition): (r.leader_broker, r.leader_epoch) for r in leadership.leaders(conn)}


def _spread(leaders, topic: str | None = None) -> Counter:
    return Counter(b for (t, _p), (b, _e) in leaders.items() if topic in (None, t))


def _even(counts: Counter, brokers) -> bool:
    per = [counts.get(b, 0) for b in brokers]
    return max(per) - min(per) <= 1 and sum(counts.values()) == sum(per)


def test_topics_are_stored_with_ids_partitions_and_configs(store) -> None:
    _topics(store.conn)
    t = topics.get(store.conn, "orders")
    assert (t.name, t.partitions, t.configs) == ("orders", 12, {"retention.ms": "-1"})
    assert [x.name for x in topics.list_all(store.conn)] == ["__consumer_offsets", "__transaction_state", "orders"]
    with pytest.raises(TopicAlreadyExists):
        topics.create(store.conn, "orders", 3)
    assert len(_leaders(store.conn)) == 112
    assert set(_leaders(store.conn).values()) == {(-1, -1)}  # no leader until a rebalance


def test_three_brokers_share_a_topic_and_the_internal_topics_evenly(store) -> None:
    _topics(store.conn)
    brokers = [session(store.dsn, n) for n in (1, 2, 3)]
    for b in brokers:
        b.register()
    done = leadership.rebalance(store.conn)
    assert (done.registered, done.live, len(done.changes)) == ((1, 2, 3), (1, 2, 3), 112)
    leaders = _leaders(store.conn)
    assert {e for _b, e in leaders.values()} == {0}
    assert sorted(_spread(leaders).values()) == [37, 37, 38]
    for topic in ("orders", *INTERNAL):
        assert _even(_spread(leaders, topic), (1, 2, 3)), topic
    assert _spread(leaders, "orders") == {1: 4, 2: 4, 3: 4}
    assert leadership.rebalance(store.conn).changes == ()  # nothing more to do
    assert _leaders(store.conn) == leaders


def test_an_expired_broker_loses_its_partitions_with_bumped_epochs_and_gets_its_preferred_back(store) -> None:
    _topics(store.conn)
    one, two = session(store.dsn, 1), session(store.dsn, 2)
    three = session(store.dsn, 3, timeout_ms=1_000)
    for b in (one, two, three):
        b.register()
    leadership.rebalance(store.conn)
    before = _leaders(store.conn)
    of_three = {tp for tp, (b, _e) in before.items() if b == 3}
    assert len(of_three) == 37

    # three stops heartbeating; its session expires on the database's clock
    wait_until(lambda: {b.node_id for b in live_brokers(store.conn)} == {1, 2}, what="expiry of broker 3")
    done = leadership.rebalance(store.conn)
    assert done.live == (1, 2)
    assert {(c.tp.topic, c.tp.partition) for c in done.changes} == of_three  # only its partitions moved
    assert all(c.old_leader == 3 and c.new_leader in (1, 2) and c.new_epoch == 1 for c in done.changes)
    during = _leaders(store.conn)
    assert sorted(_spread(during).values()) == [56, 56]
    assert all(during[tp] == before[tp] for tp in before if tp not in of_three)

    three.register()  # it comes back (a new session)
    done = leadership.rebalance(store.conn)
    assert {(c.tp.topic, c.tp.partition) for c in done.changes} == of_three
    after = _leaders(store.conn)
    assert {tp: b for tp, (b, _e) in after.items()} == {tp: b for tp, (b, _e) in before.items()}
    assert all(after[tp][1] == 2 for tp in of_three)
    assert all(after[tp][1] == 0 for tp in before if tp not in of_three)


def test_a_clean_shutdown_moves_partitions_at_once_and_no_live_broker_means_no_leader(store) -> None:
    topics.create(store.conn, "orders", 12)
    brokers = {n: session(store.dsn, n) for n in (1, 2, 3)}  # 30 s sessions: nothing expires here
    for b in brokers.values():
        b.register()
    leadership.rebalance(store.conn)
    brokers[2].deregister()
    done = leadership.rebalance(store.conn)
    assert len(done.changes) == 4 and {c.old_leader for c in done.changes} == {2}
    assert _spread(_leaders(store.conn)) == {1: 6, 3: 6}
    brokers[1].deregister()
    brokers[3].deregister()
    leadership.rebalance(store.conn)
    assert {b for b, _e in _leaders(store.conn).values()} == {-1}
    brokers[3].register()
    leadership.rebalance(store.conn)
    assert _spread(_leaders(store.conn)) == {3: 12}


def test_concurrent_rebalances_from_two_connections_do_not_conflict(store) -> None:
    """Issue 26: this test failed once with "a rebalance with 4 not reached in 15.0 s". Not a
    missed broker: each rebalance takes the advisory lock and then reads the brokers (READ
    COMMITTED), so it sees every registration committed before it, and the next one sees the
    rest. The rebalancer threads had stopped: they were bounded at 200 rebalances each, and on
    an idle machine a rebalance with nothing to move takes a few milliseconds, so both used up
    their 400 before the 13 membership steps were done (measured: 400 results and both threads
    finished at the failure; 3 of 8 passing runs also reached 400). Now they run until the test
    stops them, bounded by a deadline and a count no machine reaches in it, and a wait fails at
    once, saying why, if a rebalancer died or stopped."""
    _topics(store.conn, orders=24)
    brokers = {n: session(store.dsn, n) for n in (1, 2, 3, 4)}
    for b in brokers.values():
        b.register()
    results: list = []
    errors: list = []
    stop = threading.Event()
    deadline = time.monotonic() + 120

    def rebalancer() -> None:
        try:
            with psycopg.connect(store.dsn, autocommit=True, connect_timeout=10) as conn:
                for _ in range(1_000_000):  # bounded: by the deadline long before the count
                    if stop.is_set() or time.monotonic() > deadline:
                        break
                    results.append(leadership.rebalance(conn))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=rebalancer) for _ in range(2)]

    def seen(check) -> bool:  # type: ignore[no-untyped-def]
        assert not errors, errors
        assert all(t.is_alive() for t in threads), f"a rebalancer stopped after {len(results)} rebalances"
        return check()

    for t in threads:
        t.start()
    try:  # membership changes while both rebalance
        wait_until(lambda: seen(lambda: any(r.live == (1, 2, 3, 4) for r in results)), what="the first assignment")
        for n in (2, 3, 2, 4, 3, 2):
            k = len(results)
            brokers[n].deregister()
            wait_until(lambda: seen(lambda: any(n not in r.live for r in results[k:])), what=f"a rebalance without {n}")
            k = len(results)
            brokers[n].register()
            wait_until(lambda: seen(lambda: any(n in r.live for r in results[k:])), what=f"a rebalance with {n}")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    # the first assignment of all 124 partitions, then per round a quarter of them away and back
    assert sum(len(r.changes) for r in results) == 124 + 6 * 2 * 31
    # Each partition's epochs form one chain -1 -> 0 -> 1 -> ...: no bump was made twice, none lost.
    chains: dict = defaultdict(list)
    for r in results:
        for c in r.changes:
            chains[(c.tp.topic, c.tp.partition)].append((c.old_epoch, c.new_epoch))
    final = _leaders(store.conn)
    for tp, (_leader, epoch) in final.items():
        steps = sorted(chains[tp])
        assert steps == [(e - 1, e) for e in range(0, epoch + 1)], tp
    leadership.rebalance(store.conn)
    assert _leaders(store.conn) == final  # settled: balanced over the four
    assert _even(_spread(final), (1, 2, 3, 4))


def _batch() -> bytes:
    return R.build_batch([(b"k", b"v" * 50, ())] * 3, timestamp_ms=1_000)


def test_a_leader_whose_session_expired_can_never_append_after_the_rebalance(pg_dsn) -> None:
    """Broker 1 leads orders-0 and appends; it stops heartbeating (paused); its session expires;
    a rebalance moves the partition to broker 2 with a bumped epoch; broker 1's next append is
    refused with NOT_LEADER_OR_FOLLOWER and writes nothing; broker 2's append succeeds."""
    b1, b2 = Store(pg_dsn, broker_id=1), Store(pg_dsn, broker_id=2)
    try:
        topics.create(b1.conn, "orders", 2)
        one = session(pg_dsn, 1, timeout_ms=1_000)
        two = session(pg_dsn, 2)
        one.register()
        two.register()
        leadership.rebalance(b1.conn)
        assert _leaders(b1.conn)[("orders", 0)] == (1, 0)  # preferred leader of partition 0: broker 1
        old = b1.open_assigned("orders", 0)
        assert old.append(_batch(), R.parse_header(_batch()), 0) == (0, 2)

        wait_until(lambda: not one.holds_lease() and 1 not in {b.node_id for b in live_brokers(b1.conn)},
                   what="expiry of broker 1")
        done = leadership.rebalance(b2.conn)  # any broker may run it
        assert [(c.tp, c.old_leader, c.new_leader, c.new_epoch) for c in done.changes] == [(("orders", 0), 1, 2, 1)]

        with pytest.raises(LeaderFenced) as fenced:  # the zombie writes nothing
            old.append(_batch(), R.parse_header(_batch()), 0)
        assert isinstance(fenced.value, NotLeaderOrFollower)
        assert fenced.value.code == ErrorCode.not_leader_or_follower
        assert (fenced.value.epoch, fenced.value.store_epoch, fenced.value.store_leader) == (0, 1, 2)
        new = b2.open_assigned("orders", 0)
        assert new.leader_epoch == 1
        assert new.append(_batch(), R.parse_header(_batch()), 0) == (3, 5)
        rows = b2.conn.execute("SELECT base_offset, leader_epoch FROM oncelog_batch WHERE partition_id = %s "
                               "ORDER BY base_offset", (new.partition_id,)).fetchall()
        assert rows == [(0, 0), (3, 1)]
        with pytest.raises(BrokerSessionExpired):
            one.heartbeat()  # and broker 1 learns its session ended
    finally:
        b1.close()
        b2.close()
