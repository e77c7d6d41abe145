"""Who may see what in the web console (docs/CONSOLE.md, "Security"). Pure: the clock is
injected; the broker's credentials and ACL decisions are handed in by ``console/loop_calls.py``.

Without an authorizer (``authorizer.class.name`` unset, the default) there is no login: every
request is served and the page says that anyone who reaches the console sees every record.

With an authorizer the console needs a login by one of the broker's own SASL users (SCRAM
credentials, which SASL/PLAIN checks passwords against too: ``oncelog users add``), and then
applies that principal's ACLs (``User:NAME``, from the address the browser connects from) as
the broker would to a Kafka client of it: **Read** on a topic to browse its records;
**Describe** on a topic, group or transactional id to see it anywhere else (the state, the
timeline, the charts; a topic's Read implies its Describe, as in Kafka); Describe on the
Cluster for the object store's counters; **ClusterAction** on the Cluster for the abort (which
the broker then also checks against ``console.client.config``'s principal).

Sessions. A login makes a random 256-bit token, sent once as an ``HttpOnly; SameSite=Strict``
cookie; the table keeps its SHA-256, never the token. The table is bounded: ``MAX_SESSIONS``
(the least recently used goes first), ``IDLE_S`` without a request or ``LIFETIME_S`` in all ends
one, and a session ends when its user's credential changes or goes (checked at each request). A
session is bound to nothing else (an address changing under NAT is fine); ACLs still apply to
the address of each request. Logging out drops it.

Password guessing is bounded: each check costs a PBKDF2 of the credential's iterations, one at
a time (``PasswordGate``), and an address with ``MAX_FAILURES`` failures in ``FAILURE_WINDOW_S``
is refused (429) until the window passes; the failures table itself is bounded.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["COOKIE", "Decisions", "PasswordGate", "Session", "Sessions", "check_password", "visible_state"]

COOKIE = "oncelog_console"
MAX_SESSIONS = 256
IDLE_S = 30 * 60.0
LIFETIME_S = 8 * 3600.0
MAX_FAILURES = 10
FAILURE_WINDOW_S = 60.0
MAX_FAILURE_HOSTS = 1024
MAX_USER = 256
MAX_PASSWORD = 1024


@dataclass
class Session:
    principal: str
    user: str
    fingerprint: bytes  # the stored key of the credential the login was checked against
    created: float
    used: float


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Sessions:
    """The bounded session table (see the module docstring). Thread-safe."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, max_sessions: int = MAX_SESSIONS,
                 idle_s: float = IDLE_S, lifetime_s: float = LIFETIME_S) -> None:
        self._clock = clock
        self.max_sessions, self.idle_s, self.lifetime_s = max_sessions, idle_s, lifetime_s
        self._table: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._table)

    def create(self, user: str, fingerprint: bytes) -> str:
        """A new session for ``user``; returns its token (the cookie's value)."""
        token = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            while len(self._table) >= self.max_sessions:
                self._table.popitem(last=False)
            self._table[_digest(token)] = Session(f"User:{user}", user, fingerprint, now, now)
        return token

    def get(self, token: str | None) -> Session | None:
        """The live session of ``token`` (its use noted), or None."""
        if not token or len(token) > 128:
            return None
        key = _digest(token)
        now = self._clock()
        with self._lock:
            s = self._table.get(key)
            if s is None:
                return None
            if now - s.used > self.idle_s or now - s.created > self.lifetime_s:
                del self._table[key]
                return None
            s.used = now
            self._table.move_to_end(key)
            return s

    def drop(self, token: str | None) -> None:
        if token:
            with self._lock:
                self._table.pop(_digest(token), None)


def check_password(salt: bytes, iterations: int, stored_key: bytes, hash_name: str, password: str) -> bool:
    """Whether ``password`` is the one a SCRAM credential was made from (RFC 5802: StoredKey =
    H(HMAC(Hi(password, salt, i), "Client Key"))), compared in constant time. This is the check
    SASL/PLAIN makes against the broker's SCRAM credentials."""
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    return hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), stored_key)


class PasswordGate:
    """One password check at a time, and addresses that failed too often refused for a while.
    Thread-safe."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._check = threading.Lock()
        self._lock = threading.Lock()
        self._failures: OrderedDict[str, list[float]] = OrderedDict()

    def refused(self, host: str) -> bool:
        """Whether ``host`` has used up its failures for now."""
        now = self._clock()
        with self._lock:
            times = [t for t in self._failures.get(host, ()) if now - t < FAILURE_WINDOW_S]
            if times:
                self._failures[host] = times
            else:
                self._failures.pop(host, None)
            return len(times) >= MAX_FAILURES

    def failed(self, host: str) -> None:
        with self._lock:
            self._failures.setdefault(host, []).append(self._clock())
            self._failures.move_to_end(host)
            while len(self._failures) > MAX_FAILURE_HOSTS:
                self._failures.popitem(last=False)

    def check(self, fn: Callable[[], bool]) -> bool:
        """Run one password check (``fn``), never two at once."""
        with self._check:
            return fn()


@dataclass(frozen=True)
class Decisions:
    """What one principal may see, decided by the broker's authorizer for the names of one
    document: sets of the topics (Describe), groups, transactional ids it may describe, and
    whether it may describe the Cluster. ``everything``: no authorizer."""

    topics: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    transactional_ids: frozenset[str] = frozenset()
    cluster: bool = False
    everything: bool = False

    def topic(self, name: str) -> bool:
        return self.everything or name in self.topics


def _tp_topic(name: str) -> str:
    """The topic of a ``topic-partition`` string."""
    return name.rsplit("-", 1)[0]


def visible_state(doc: dict[str, Any], d: Decisions) -> dict[str, Any]:
    """``doc`` (an /api/state document) with only what ``d`` allows (a new dict; ``doc`` is
    shared and never changed)."""
    if d.everything:
        return doc
    out = dict(doc)
    out["topics"] = [dict(t, groups=[g for g in t["groups"] if g["group_id"] in d.groups])
                     for t in doc["topics"] if d.topic(t["name"])]
    out["partitions"] = [p for p in doc["partitions"] if d.topic(p["topic"])]
    out["leaders"] = [p for p in doc.get("leaders", ()) if d.topic(p["topic"])]
    groups = []
    for g in doc["groups"]:
        if g["group_id"] not in d.groups:
            continue
        g = dict(g, offsets=[o for o in g["offsets"] if d.topic(o["topic"])],
                 members=[dict(m, assignment=[a for a in m["assignment"] if d.topic(_tp_topic(a))])
                          for m in g["members"]])
        if "share_partitions" in g:
            g["share_partitions"] = [s for s in g["share_partitions"] if d.topic(s["topic"])]
        g["lag"] = sum(o["lag"] or 0 for o in g.get("share_partitions") or g["offsets"])
        groups.append(g)
    out["groups"] = groups
    out["transactions"] = [dict(t, partitions=[p for p in t["partitions"] if d.topic(_tp_topic(p))])
                           for t in doc["transactions"] if t["transactional_id"] in d.transactional_ids]
    hanging = dict(doc["hanging"])
    hanging["items"] = [h if not h.get("transactional_id") or h["transactional_id"] in d.transactional_ids
                        else dict(h, transactional_id=None, transactional_id_hidden=True)
                        for h in doc["hanging"]["items"] if d.topic(h["topic"])]
    out["hanging"] = hanging
    if not d.cluster:
        out["diskless"] = None
    return out
