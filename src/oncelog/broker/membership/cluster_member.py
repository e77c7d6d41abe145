"""A broker's membership of a cluster on PostgreSQL (issue 15): the asyncio side of
cluster/membership.py and cluster/leadership.py.

Theory of operation. Every store call of the membership runs on ONE control thread (a
single-worker executor owning one ``StoreConnection``), so calls are serialized and the event
loop never waits on the database for them. ``start`` creates the schema (idempotent), registers
the broker (a new broker epoch), rebalances leaders and loads the first ``ClusterView``. Then two
timers (broker/periodic.py):

* heartbeat, every ``broker.heartbeat.interval.ms``: extends the session. If the store says the
  session has ended (``BrokerSessionExpired``), or the store cannot be reached and the broker's
  own conservative lease (``BrokerSession.holds_lease``) has run out, the broker drops every
  leadership at once (``on_change(view, may_lead=False)``), then registers again (a new broker
  epoch) and rebalances;
* poll, every ``POLL_INTERVAL_S`` and at once when a ``NOTIFY oncelog_metadata`` arrives
  (cluster/notify.py; a hint only, notifications are not durable): loads a view (live brokers, topics, leaders and epochs) and
  hands it to ``on_change``; when the set of live brokers differs from the one its last
  successful rebalance saw, it rebalances (any broker may; the second finds nothing to do) and
  loads again. A failed rebalance is retried at the next poll.

``on_change(view, may_lead)`` is called on the event loop after every view and every loss of
the lease (then with the last view minus this broker, which Metadata and FindCoordinator answer
from until a view is loaded again: a broker cut from the store names itself nowhere); the
leader tracker opens and closes partitions from it. ``may_lead`` is False
whenever this broker does not surely hold its session: safety never rests on it (every append
is fenced by its leader epoch in the store), it only stops a deposed broker from answering.

``stop`` deregisters (the session ends at once) and rebalances, so the broker's partitions move
without waiting for the session timeout.

Metadata changes (topics, configs) are not made here: broker/membership/postgres.py writes them
through ``call`` and then ``refresh``es or ``rebalance``s (issue 27).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Mapping, Sequence, TypeVar

from oncelog.broker import periodic
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.clock import Clock
from oncelog.cluster import leadership, schema
from oncelog.cluster import topics as store_topics
from oncelog.cluster.connection import StoreConnection, connector
from oncelog.cluster.errors import BrokerNotRegistered, BrokerSessionExpired, StoreUnavailable
from oncelog.cluster.membership import BrokerSession, SessionConfig
from oncelog.cluster.notify import MetadataListener
from oncelog.cluster.view import ClusterView, load
from oncelog.protocol.errors import KafkaError

__all__ = ["POLL_INTERVAL_S", "ClusterMember"]

log = logging.getLogger(__name__)

#: how often a broker reads the leaders and live brokers from the store
POLL_INTERVAL_S = 0.5
T = TypeVar("T")


class ClusterMember:
    """See the module docstring. ``on_change(view, may_lead)`` runs on the event loop."""

    def __init__(self, dsn: str, config: BrokerConfig, clock: Clock,
                 on_change: Callable[[ClusterView, bool], None]) -> None:
        self.dsn = dsn
        self.node_id = config.node_id
        self.config = config
        self.clock = clock
        self.session_config = SessionConfig(config.broker_session_timeout_ms, config.broker_heartbeat_interval_ms)
        self._on_change = on_change
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"oncelog-cluster-{self.node_id}")
        self._control = StoreConnection(connector(dsn), f"node {self.node_id} control")  # control thread only
        self.session: BrokerSession | None = None
        self.view = ClusterView()
        self.cluster_id = ""
        self._tasks: list[asyncio.Task[None]] = []
        self._registering = asyncio.Lock()
        self._rebalanced_for: tuple[int, ...] = ()  # the live brokers the last rebalance saw
        self._listener: MetadataListener | None = None
        self._hinted: asyncio.Task[None] | None = None
        #: awaited after every metadata poll (and so after every notification): ACL reload (issue 18)
        self.after_poll: list[Callable[[], Awaitable[None]]] = []
        #: True while the last view was applied with leave to lead (partitions may be open here)
        self._leading = False

    # -- the control thread ----------------------------------------------------------------

    async def call(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(conn)`` on the control thread with its connection (one store call at a time;
        the metadata stores of broker/membership/postgres.py write through it). Database failures
        become StoreUnavailable (the connection is dropped and reopened by the next call)."""
        def run() -> T:
            conn = self._control.raw()
            try:
                return fn(conn)
            except KafkaError:
                raise
            except Exception as exc:
                self._control.drop()
                raise StoreUnavailable(f"node {self.node_id}: store call failed: {exc}") from None

        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    # -- lifecycle --------------------------------------------------------------------------

    async def prepare(self, internal_topics: Sequence[tuple[str, int, dict[str, str]]]) -> dict[str, int]:
        """Before ``start``: create the schema and the internal topics (name, partitions,
        configs) unless they exist; returns each internal topic's partition count as stored
        (the first broker's: the coordinators of every broker must place keys alike).
        Raises StoreUnavailable."""
        self.cluster_id = await self.call(_ensure_schema_and_cluster_id)

        def ensure(conn: Any) -> dict[str, int]:
            return {name: store_topics.ensure(conn, name, n, configs).partitions for name, n, configs in internal_topics}

        return await self.call(ensure)

    async def start(self, host: str, port: int, listeners: Mapping[str, tuple[str, int]] | None = None) -> None:
        """Create the schema (unless ``prepare`` did), register, rebalance, load the first view,
        start the timers. Raises DuplicateBrokerRegistration (another live process holds the
        node id) or StoreUnavailable."""
        if not self.cluster_id:
            self.cluster_id = await self.call(_ensure_schema_and_cluster_id)
        self.session = BrokerSession(self._control, self.node_id, host, port, config=self.session_config,
                                     clock=self.clock, listeners=listeners)
        await self._register()
        cfg = self.session_config
        self._tasks = [
            periodic.every(cfg.heartbeat_interval_ms / 1000, self._heartbeat, "broker heartbeat", log),
            periodic.every(POLL_INTERVAL_S, self._poll, "cluster metadata poll", log),
        ]
        loop = asyncio.get_running_loop()
        self._listener = MetadataListener(connector(self.dsn), lambda: loop.call_soon_threadsafe(self._notified),
                                          name=f"oncelog-listen-{self.node_id}").start()

    def _notified(self) -> None:
        """A rebalance somewhere changed leaders (a hint): load a view now, unless a load
        started by a hint is already running (it will see the change)."""
        if self._hinted is None or self._hinted.done():
            self._hinted = asyncio.get_running_loop().create_task(self._poll_logged())

    async def _poll_logged(self) -> None:
        try:
            await self._poll()
        except Exception:
            log.exception("bug: cluster metadata poll (after a notification) failed")

    async def stop(self) -> None:
        """Stop the timers, end the session and move this broker's partitions (best effort:
        if the store is unreachable the session simply expires)."""
        if self._listener is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._listener.close)
        tasks = [*self._tasks, *([self._hinted] if self._hinted is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._on_change(self.view, False)
        try:
            if self.session is not None:
                session = self.session
                await self.call(lambda _conn: session.deregister())
                await self.call(leadership.rebalance)
                log.info("node %d deregistered; its partitions moved", self.node_id)
        except KafkaError as exc:
            log.warning("node %d: deregistering failed (%s); its session will expire", self.node_id, exc)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._control.drop)
        self._executor.shutdown(wait=True)

    def may_lead(self) -> bool:
        return self.session is not None and self.session.holds_lease()

    def fence_if_lease_lapsed(self) -> None:
        """Called before every request is handled: a broker whose own conservative lease has run
        out (the process was paused, or its event loop or the store stalled, past the session
        timeout) drops every leadership *now*, before it answers anything from them. Other
        brokers may already lead its partitions and coordinators: a zombie must not answer a
        stale committed offset (OffsetFetch), a stale fetch, or a coordinator request. After
        SIGCONT the event loop serves the requests queued meanwhile before its heartbeat timer
        runs, so the heartbeat alone comes too late (long run 11: a copier read an offset three
        transactions old from its paused group coordinator and copied them again). One clock
        read per request while the lease holds."""
        if self._leading and not self.may_lead():
            log.warning("node %d: lease lapsed (paused, or the store unreachable, past the session timeout); "
                        "dropping every leadership before serving", self.node_id)
            self._drop_leaderships()

    # -- membership -------------------------------------------------------------------------

    async def _register(self) -> None:
        async with self._registering:
            session = self.session
            assert session is not None
            epoch = await self.call(lambda _conn: session.register())
            log.info("node %d registered at %s:%d, broker epoch %d", self.node_id, session.host, session.port, epoch)
            await self.rebalance()

    async def rebalance(self) -> None:
        """Rebalance leaders in the store, then load and apply a new view."""
        done = await self.call(leadership.rebalance)
        if done.changes:
            log.info("node %d rebalanced: %d partition(s) moved; live brokers %s", self.node_id,
                     len(done.changes), list(done.live))
        self._rebalanced_for = done.live
        await self.refresh()

    async def refresh(self) -> ClusterView:
        """Load a view from the store and apply it."""
        view = await self.call(load)
        self._apply(view)
        return view

    def _apply(self, view: ClusterView) -> None:
        self.view = view
        self._leading = self.may_lead()
        self._on_change(view, self._leading)

    def _drop_leaderships(self) -> None:
        """The session may be over: close every partition, and stop naming this broker in the
        answers given from the last view (Metadata: LEADER_NOT_AVAILABLE for what it led;
        FindCoordinator: COORDINATOR_NOT_AVAILABLE for its keys) until a view is loaded from the
        store again. That view is stale (this broker cannot read the store, or its session
        ended), and a client that asks only this broker would otherwise go round in circles:
        Metadata naming it, Produce answering NOT_LEADER_OR_FOLLOWER, Metadata naming it again."""
        view = self.view
        if self.node_id in view.live_ids:
            view = dataclasses.replace(view, brokers=tuple(b for b in view.brokers if b.node_id != self.node_id))
            self.view = view
        self._leading = False
        self._on_change(view, False)

    async def _heartbeat(self) -> None:
        session = self.session
        assert session is not None
        try:
            await self.call(lambda _conn: session.heartbeat())
        except (BrokerSessionExpired, BrokerNotRegistered) as exc:
            log.warning("node %d: %s; dropping every leadership and registering again", self.node_id, exc)
            self._drop_leaderships()
            try:
                await self._register()
            except KafkaError as again:  # the store is down, or the node id is held: next heartbeat retries
                log.warning("node %d: registering again failed (retried at the next heartbeat): %s",
                            self.node_id, again)
        except StoreUnavailable as exc:
            if not session.holds_lease():
                log.warning("node %d: heartbeat failed past the session timeout (%s); dropping every leadership",
                            self.node_id, exc)
                self._drop_leaderships()
            else:
                log.info("node %d: heartbeat failed (%s); retrying", self.node_id, exc)

    async def _poll(self) -> None:
        try:
            view = await self.call(load)
        except StoreUnavailable as exc:
            log.info("node %d: reading the cluster metadata failed: %s", self.node_id, exc)
            if not self.may_lead():
                self._drop_leaderships()
            return
        changed = view.live_ids != self._rebalanced_for
        self._apply(view)
        for hook in self.after_poll:
            try:
                await hook()
            except StoreUnavailable as exc:
                log.info("node %d: after-poll hook failed: %s", self.node_id, exc)
        if changed:
            log.info("node %d: live brokers now %s", self.node_id, list(view.live_ids))
            try:
                await self.rebalance()
            except KafkaError as exc:  # the next poll sees the same change and tries again
                log.info("node %d: rebalancing failed (retried at the next poll): %s", self.node_id, exc)

def _ensure_schema_and_cluster_id(conn: Any) -> str:
    """Create the schema unless it exists and return the cluster id stored with it (made by the
    first broker)."""
    schema.ensure_schema(conn)
    new = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    with conn.transaction():
        conn.execute("INSERT INTO oncelog_cluster (one, cluster_id) VALUES (true, %s) ON CONFLICT DO NOTHING", (new,))
        (cid,) = conn.execute("SELECT cluster_id FROM oncelog_cluster").fetchone()
    return cid


__all__ += ["connector"]
