"""Broker membership: registration, sessions kept alive by heartbeats, the live brokers.

A broker process registers its node id (``BrokerSession.register``) and then heartbeats every
``broker.heartbeat.interval.ms``; each heartbeat moves its session's expiry to the database's
``clock_timestamp()`` plus ``broker.session.timeout.ms``. Every expiry is computed and compared
on the DATABASE's clock, so the brokers' clocks never matter. A broker is live while its
``session_expires`` is in the future; a rebalance (leadership.rebalance) moves the partitions of
brokers that are not live to live ones, bumping their leader epochs, which fences the old
leader at the resource (its appends are refused, group_commit.py).

Rules (as Kafka's controller):

* a node id is held by one process at a time: registering it while another incarnation's
  session is live raises ``DuplicateBrokerRegistration``; the same incarnation (a retry after a
  lost answer) may register again;
* every registration takes a new ``broker_epoch`` (a database sequence: only grows);
* a heartbeat after the session ended (expired, deregistered, or the node id re-registered by
  another process) raises ``BrokerSessionExpired``: the broker must stop acting as a leader and
  register again; a heartbeat never revives an ended session;
* ``deregister`` ends the session at once (a clean shutdown), so the next rebalance moves the
  broker's partitions without waiting for the timeout. The row stays: a broker that returns
  gets its preferred partitions back (assignment.py). ``forget`` removes a broker for good.

``BrokerSession.holds_lease`` is the broker's own conservative view, on its injected monotonic
clock: the session surely lasts until the time the last successful heartbeat was *sent* plus the
timeout (the database computed the expiry later than that). Past it the broker stops serving as
leader even before it hears from the store; fencing does not depend on it.

Not thread-safe: one BrokerSession per broker process, driven by one thread.
"""

from __future__ import annotations

import uuid
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from oncelog.clock import Clock, SystemClock
from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.errors import BrokerNotRegistered, BrokerSessionExpired, DuplicateBrokerRegistration
from oncelog.protocol.errors import InvalidConfig

__all__ = ["BROKER_HEARTBEAT_INTERVAL_MS", "BROKER_SESSION_TIMEOUT_MS", "BrokerInfo", "BrokerSession", "SessionConfig", "forget", "live_brokers", "registered_brokers"]


#: Kafka's defaults for ``broker.session.timeout.ms`` and ``broker.heartbeat.interval.ms``
BROKER_SESSION_TIMEOUT_MS = 9_000
BROKER_HEARTBEAT_INTERVAL_MS = 2_000


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Kafka's ``broker.session.timeout.ms`` and ``broker.heartbeat.interval.ms``."""

    session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = BROKER_HEARTBEAT_INTERVAL_MS

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            raise InvalidConfig(f"broker.heartbeat.interval.ms {self.heartbeat_interval_ms} must be positive and "
                                f"below broker.session.timeout.ms {self.session_timeout_ms}")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "SessionConfig":
        """From Kafka-named properties (others are ignored); raises InvalidConfig."""
        try:
            return cls(int(props.get("broker.session.timeout.ms", BROKER_SESSION_TIMEOUT_MS)),
                       int(props.get("broker.heartbeat.interval.ms", BROKER_HEARTBEAT_INTERVAL_MS)))
        except ValueError as exc:
            raise InvalidConfig(f"bad broker session setting: {exc}") from None


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A registered broker as the store has it; ``live`` as of the query's database time."""

    node_id: int
    host: str
    port: int
    rack: str | None
    broker_epoch: int
    live: bool
    #: issue 18: listener name -> [advertised host, port], every listener of the broker
    listeners: dict = field(default_factory=dict)  # type: ignore[type-arg]

    def endpoint(self, listener: str | None) -> tuple[str, int]:
        """The address of listener ``listener`` (the name the client came on); the registered
        (primary) address when the broker has no such listener."""
        ep = self.listeners.get(listener) if listener else None
        return (str(ep[0]), int(ep[1])) if ep else (self.host, self.port)


_INFO = "node_id, host, port, rack, broker_epoch, session_expires > clock_timestamp(), listeners"


def registered_brokers(conn: Any) -> list[BrokerInfo]:
    """Every broker ever registered and not forgotten, by node id, live or not."""
    return [BrokerInfo(*r) for r in conn.execute(f"SELECT {_INFO} FROM oncelog_broker ORDER BY node_id").fetchall()]


def live_brokers(conn: Any) -> list[BrokerInfo]:
    """The brokers whose session has not expired on the database's clock, by node id."""
    rows = conn.execute(f"SELECT {_INFO} FROM oncelog_broker WHERE session_expires > clock_timestamp() "
                        "ORDER BY node_id").fetchall()
    return [BrokerInfo(*r) for r in rows]


def forget(conn: Any, node_id: int) -> bool:
    """Remove a broker that is not live from the registered set (its preferred partitions are
    dealt anew at the next rebalance). False if it is live or unknown."""
    row = conn.execute("DELETE FROM oncelog_broker WHERE node_id = %s AND session_expires <= clock_timestamp() "
                       "RETURNING node_id", (node_id,)).fetchone()
    return row is not None


_REGISTER = """
INSERT INTO oncelog_broker AS b (node_id, host, port, rack, incarnation, broker_epoch, session_timeout_ms,
                                 registered_at, session_expires, listeners)
VALUES (%(node)s, %(host)s, %(port)s, %(rack)s, %(inc)s, nextval('oncelog_broker_epoch_seq'), %(timeout)s,
        clock_timestamp(), clock_timestamp() + %(timeout)s * interval '1 millisecond', %(listeners)s::jsonb)
ON CONFLICT (node_id) DO UPDATE SET
    host = EXCLUDED.host, port = EXCLUDED.port, rack = EXCLUDED.rack, incarnation = EXCLUDED.incarnation,
    listeners = EXCLUDED.listeners,
    broker_epoch = EXCLUDED.broker_epoch, session_timeout_ms = EXCLUDED.session_timeout_ms,
    registered_at = EXCLUDED.registered_at, session_expires = EXCLUDED.session_expires
WHERE b.session_expires <= clock_timestamp() OR b.incarnation = EXCLUDED.incarnation
RETURNING broker_epoch
"""

_HEARTBEAT = """
UPDATE oncelog_broker SET session_expires = clock_timestamp() + session_timeout_ms * interval '1 millisecond'
WHERE node_id = %s AND broker_epoch = %s AND session_expires > clock_timestamp()
RETURNING broker_epoch
"""


class BrokerSession:
    """One broker process's membership in the store (see the module docstring).

    ``store`` is the broker's membership connection (re-opened after failures; a failure raises
    ``StoreUnavailable``, retriable: the session may still be alive, ``holds_lease`` says how
    long it surely is). ``clock`` is only used for ``holds_lease``.
    """

    def __init__(self, store: StoreConnection, node_id: int, host: str, port: int, *, rack: str | None = None,
                 config: SessionConfig = SessionConfig(), clock: Clock | None = None,
                 incarnation: uuid.UUID | None = None, listeners: Mapping[str, tuple[str, int]] | None = None) -> None:
        """``listeners``: every listener's advertised endpoint (issue 18), registered with the broker."""
        self._store = store
        self.listeners = {k: [h, p] for k, (h, p) in (listeners or {}).items()}
        self.node_id = node_id
        self.host, self.port, self.rack = host, port, rack
        self.config = config
        self._clock = clock or SystemClock()
        self.incarnation = incarnation or uuid.uuid4()
        self.broker_epoch: int | None = None
        self._lease_until_ms: int | None = None  # monotonic

    def register(self) -> int:
        """Register (or re-register after the session ended) and return the new broker epoch.
        Raises DuplicateBrokerRegistration while another process's session holds the node id."""
        sent = self._clock.monotonic_ms()
        rows = self._store.query(_REGISTER, {"node": self.node_id, "host": self.host, "port": self.port,
                                             "rack": self.rack, "inc": self.incarnation,
                                             "listeners": json.dumps(self.listeners),
                                             "timeout": self.config.session_timeout_ms})
        if not rows:
            held = self._store.query("SELECT incarnation, broker_epoch, "
                                     "(extract(epoch FROM session_expires - clock_timestamp()) * 1000)::bigint "
                                     "FROM oncelog_broker WHERE node_id = %s", (self.node_id,))
            inc, epoch, left = held[0] if held else (None, None, None)
            raise DuplicateBrokerRegistration(
                f"node {self.node_id}: held by a live broker (incarnation {inc}, broker epoch {epoch}, session "
                f"expires in {left} ms); this process is incarnation {self.incarnation}")
        self.broker_epoch = rows[0][0]
        self._lease_until_ms = sent + self.config.session_timeout_ms
        return self.broker_epoch

    def heartbeat(self) -> None:
        """Extend the session by the timeout, from the database's now. Raises
        BrokerSessionExpired if it had already ended (the broker must stop leading and register
        again), BrokerNotRegistered before ``register``, StoreUnavailable if the store could not
        be reached (the session may still be alive until ``holds_lease`` says otherwise)."""
        if self.broker_epoch is None:
            raise BrokerNotRegistered(f"node {self.node_id}: heartbeat before registration")
        sent = self._clock.monotonic_ms()
        if not self._store.query(_HEARTBEAT, (self.node_id, self.broker_epoch)):
            epoch, self.broker_epoch, self._lease_until_ms = self.broker_epoch, None, None
            raise BrokerSessionExpired(f"node {self.node_id}: session of broker epoch {epoch} has ended "
                                       f"(expired, deregistered or replaced)")
        self._lease_until_ms = sent + self.config.session_timeout_ms

    def holds_lease(self) -> bool:
        """True while the session surely lasts (the broker's own conservative view)."""
        return self._lease_until_ms is not None and self._clock.monotonic_ms() < self._lease_until_ms

    def deregister(self) -> None:
        """End the session now (clean shutdown); the row stays. Idempotent."""
        if self.broker_epoch is None:
            return
        self._store.query("UPDATE oncelog_broker SET session_expires = least(session_expires, clock_timestamp()) "
                          "WHERE node_id = %s AND broker_epoch = %s RETURNING node_id", (self.node_id, self.broker_epoch))
        self.broker_epoch, self._lease_until_ms = None, None
