"""The console's JSON API, apart from HTTP (server.py is the shell that parses requests and
writes answers; this module decides them). docs/CONSOLE.md lists the routes.

Every route but ``/api/session`` and ``/api/login`` needs a login when the broker has an
authorizer (``access.py``), and shows only what the session's principal may see. Each route's
work is bounded: the state document is shared (``server.StateSource``), the message browser and
the timeline read within their budgets (messages.py, timeline.py), the history is a bounded ring
(broker/observability/history.py).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol
from urllib.parse import parse_qs

from oncelog.acl.model import CLUSTER_NAME, AclOperation, ResourceType
from oncelog.console import loop_calls
from oncelog.console.access import COOKIE, MAX_PASSWORD, MAX_USER, Decisions, Session, check_password, visible_state
from oncelog.console.messages import QueryError, page, parse_query
from oncelog.console.timeline import timeline
from oncelog.console.transactions import AbortRefused
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    import asyncio

    from oncelog.broker.observability.history import History
    from oncelog.broker.observability.observe import BrokerState
    from oncelog.console.access import PasswordGate, Sessions
    from oncelog.console.loop_calls import ConsoleBroker
    from oncelog.console.transactions import TxnLink

log = logging.getLogger(__name__)

__all__ = ["Api", "Call", "Reply", "parse_abort"]

#: after a failed login, the answer waits this long (seconds): guessing is slow even one at a time
FAILED_LOGIN_DELAY_S = 0.5
NO_AUTHORIZER = ("no authorizer is configured (authorizer.class.name): the console has no login, and anyone who "
                 "reaches it sees every topic's records")


@dataclass
class Call:
    """One request as the API sees it. ``host``: the client's address (the ACLs' host)."""

    method: str
    path: str
    query: str = ""
    body: bytes = b""
    host: str = "127.0.0.1"
    token: str | None = None


@dataclass
class Reply:
    status: int
    doc: Any = None
    body: bytes | None = None  # already encoded JSON (a shared document)
    cookies: list[str] = field(default_factory=list)


def _error(status: int, message: str) -> Reply:
    return Reply(status, {"error": message})


def _cookie(token: str, max_age: int) -> str:
    return f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}"


class ConsoleParts(Protocol):
    """What the routes use of the console (``oncelog.console.Console``)."""

    broker: "ConsoleBroker"
    loop: "asyncio.AbstractEventLoop | None"
    sessions: "Sessions"
    gate: "PasswordGate"
    history: "History"
    txns: "TxnLink"
    state: Any  # server.StateSource (the server imports these routes)

    def document(self, raw: "BrokerState", hanging: dict[str, Any]) -> tuple[dict[str, Any], bytes]: ...


class Api:
    """The routes over one console (``ConsoleParts``)."""

    def __init__(self, console: ConsoleParts) -> None:
        self.c = console
        self.routes: dict[tuple[str, str], tuple[Callable[[Call, Session | None], Reply], bool]] = {
            ("GET", "/api/session"): (self.session, False),
            ("POST", "/api/login"): (self.login, False),
            ("POST", "/api/logout"): (self.logout, False),
            ("GET", "/api/state"): (self.state, True),
            ("GET", "/api/messages"): (self.messages, True),
            ("GET", "/api/timeline"): (self.timeline, True),
            ("GET", "/api/history"): (self.history, True),
            ("POST", "/api/transactions/abort"): (self.abort, True),
        }

    @property
    def login_required(self) -> bool:
        return loop_calls.acls_on(self.c.broker)

    def handle(self, call: Call) -> Reply:
        """Answer ``call``: 404 for an unknown route, 401 when it needs a login it does not have."""
        route = self.routes.get((call.method, call.path))
        if route is None:
            return _error(404, "not found")
        fn, needs_login = route
        session = self._session(call) if self.login_required else None
        if needs_login and self.login_required and session is None:
            return _error(401, "log in first: the broker has an authorizer, and the console shows each user what "
                               "their ACLs allow")
        try:
            return fn(call, session)
        except TimeoutError:
            return _error(503, "the broker did not answer in time")
        except RuntimeError as exc:  # the broker is stopping
            return _error(503, str(exc))
        except Exception:  # noqa: BLE001 - a bug answers 500 and is logged; it never reaches the broker
            log.exception("console: %s %s failed", call.method, call.path)
            return _error(500, "the console failed to answer (see the broker's log)")

    def _session(self, call: Call) -> Session | None:
        """The call's live session whose user still has the credential it logged in with."""
        s = self.c.sessions.get(call.token)
        if s is None:
            return None
        cred = loop_calls.credential(self.c.loop, self.c.broker, s.user)
        if cred is None or cred[2] != s.fingerprint:
            self.c.sessions.drop(call.token)
            return None
        return s

    def _decisions(self, s: Session | None, host: str, topics: Any = (), groups: Any = (), tids: Any = ()) -> Decisions:
        if s is None:
            return Decisions(everything=True)
        return loop_calls.decide(self.c.loop, self.c.broker, s.principal, host, topics, groups, tids)

    def _may(self, s: Session | None, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        return s is None or loop_calls.may(self.c.loop, self.c.broker, s.principal, host, op, rtype, name)

    # -- who ---------------------------------------------------------------------------------

    def session(self, call: Call, s: Session | None) -> Reply:
        return Reply(200, {"login_required": self.login_required, "principal": s.principal if s else None,
                           "authorizer": self.login_required, "note": None if self.login_required else NO_AUTHORIZER})

    def login(self, call: Call, _s: Session | None) -> Reply:
        if not self.login_required:
            return _error(409, "there is nothing to log in to: " + NO_AUTHORIZER)
        try:
            doc = json.loads(call.body)
            user, password = doc["username"], doc["password"]
            if not isinstance(user, str) or not isinstance(password, str):
                raise TypeError
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return _error(400, 'expected {"username": "...", "password": "..."}')
        if not 0 < len(user) <= MAX_USER or not 0 < len(password) <= MAX_PASSWORD:
            return _error(400, f"username: 1 to {MAX_USER} characters, password: 1 to {MAX_PASSWORD}")
        gate = self.c.gate
        if gate.refused(call.host):
            return _error(429, "too many failed logins from this address: wait a minute")
        cred = loop_calls.credential(self.c.loop, self.c.broker, user)
        ok = cred is not None and gate.check(lambda: check_password(cred[0], cred[1], cred[2], cred[3], password))
        if not ok or cred is None:
            gate.failed(call.host)
            log.info("console: failed login for user %r from %s", user[:64], call.host)
            time.sleep(FAILED_LOGIN_DELAY_S)
            return _error(401, "invalid user name or password")
        token = self.c.sessions.create(user, cred[2])
        log.info("console: user %r logged in from %s", user[:64], call.host)
        return Reply(200, {"principal": f"User:{user}"}, cookies=[_cookie(token, int(self.c.sessions.lifetime_s))])

    def logout(self, call: Call, _s: Session | None) -> Reply:
        self.c.sessions.drop(call.token)
        return Reply(200, {"logged_out": True}, cookies=[_cookie("", 0)])

    # -- what --------------------------------------------------------------------------------

    def state(self, call: Call, s: Session | None) -> Reply:
        try:
            raw = self.c.state.raw()
        except Exception as exc:  # noqa: BLE001 - the broker's trouble is the page's message
            log.warning("console: the broker snapshot failed: %r", exc)
            return _error(503, f"the broker did not answer: {exc!r}")
        doc, body = self.c.document(raw, self.c.txns.hanging())
        if s is None:
            return Reply(200, body=body)
        d = self._decisions(s, call.host, (t["name"] for t in doc["topics"]),
                            (g["group_id"] for g in doc["groups"]),
                            (t["transactional_id"] for t in doc["transactions"]))
        return Reply(200, visible_state(doc, d))

    def _partition_args(self, call: Call) -> tuple[str, int, int | None]:
        try:
            qs = parse_qs(call.query, max_num_fields=8)
        except ValueError:
            raise QueryError("at most 8 query fields") from None
        topic, part, offset = (qs.get("topic") or [""])[-1], (qs.get("partition") or [""])[-1], (qs.get("offset") or [None])[-1]
        if not 0 < len(topic) <= 249 or not part.isdigit() or (offset is not None and not offset.isdigit()):
            raise QueryError("expected topic=NAME&partition=N[&offset=O]")
        return topic, int(part), None if offset is None else int(offset)

    def _read(self, fn: Callable[[], dict[str, Any]]) -> Reply:
        try:
            return Reply(200, fn())
        except KafkaError as exc:
            status = 404 if exc.code in (ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id) else 409
            return _error(status, f"{exc.code.name.upper()}: {exc}")

    def messages(self, call: Call, s: Session | None) -> Reply:
        try:
            q = parse_query(call.query)
        except QueryError as exc:
            return _error(400, str(exc))
        if not self._may(s, call.host, AclOperation.READ, ResourceType.TOPIC, q.topic):
            return _error(403, f"{s.principal if s else ''} may not read topic {q.topic} (it needs Read on it)")
        reader = loop_calls.LoopReader(self.c.loop, self.c.broker, q.topic, q.partition)
        reply = self._read(lambda: page(reader, q))
        if reply.status == 200:
            self._name_producers(reply.doc["rows"])
        if reply.status == 200 and s is not None:  # name only the transactional ids it may describe
            self._hide_ids(s, call.host, reply.doc["rows"])
        return reply

    def _name_producers(self, items: list[dict[str, Any]]) -> None:
        """Cluster mode: name the producers this broker's coordinator does not know (another
        broker coordinates their transactional ids) with ListTransactions."""
        if self.c.broker.membership.mode != "cluster":
            return
        unnamed = {r["producer_id"] for r in items if r.get("transactional_id") is None and r.get("producer_id", -1) >= 0
                   and r.get("fate") != "plain" and not r.get("transactional_id_hidden")}
        if unnamed:
            names = self.c.txns.transactional_ids(unnamed)
            for r in items:
                if r.get("transactional_id") is None and r.get("producer_id") in names:
                    r["transactional_id"] = names[r["producer_id"]]

    def _hide_ids(self, s: Session, host: str, items: list[dict[str, Any]]) -> None:
        tids = {r["transactional_id"] for r in items if r.get("transactional_id")}
        if tids:
            allowed = self._decisions(s, host, tids=tids).transactional_ids
            for r in items:
                if r.get("transactional_id") and r["transactional_id"] not in allowed:
                    r["transactional_id"], r["transactional_id_hidden"] = None, True

    def timeline(self, call: Call, s: Session | None) -> Reply:
        try:
            topic, partition, offset = self._partition_args(call)
        except QueryError as exc:
            return _error(400, str(exc))
        if not self._may(s, call.host, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
            return _error(403, f"{s.principal if s else ''} may not describe topic {topic}")
        reader = loop_calls.LoopReader(self.c.loop, self.c.broker, topic, partition)
        reply = self._read(lambda: timeline(reader, topic, partition, offset))
        if reply.status == 200:
            for key in ("ranges", "lanes", "open"):
                self._name_producers(reply.doc[key])
        if reply.status == 200 and s is not None:
            for key in ("ranges", "lanes", "open"):
                self._hide_ids(s, call.host, reply.doc[key])
        return reply

    def history(self, call: Call, s: Session | None) -> Reply:
        h = self.c.history
        with h.lock:
            doc = h.series()
        if s is not None:
            topics = {n for k in ("produce_bytes", "produce_records", "fetch_bytes") for n in doc["series"][k]}
            d = self._decisions(s, call.host, topics, doc["series"]["group_lag"])
            for kind, per in doc["series"].items():
                names = d.groups if kind == "group_lag" else d.topics
                doc["series"][kind] = {n: v for n, v in per.items() if n in names}
            doc["group_types"] = {g: t for g, t in doc["group_types"].items() if g in d.groups}
        return Reply(200, doc)

    def abort(self, call: Call, s: Session | None) -> Reply:
        try:
            req = parse_abort(call.body)
        except ValueError as exc:
            return _error(400, str(exc))
        if not self._may(s, call.host, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return _error(403, f"{s.principal if s else ''} may not abort transactions (it needs ClusterAction on "
                               "the Cluster)")
        try:
            done = self.c.txns.abort(*req)
        except AbortRefused as exc:
            return _error(exc.status, str(exc))
        finally:
            self.c.state.invalidate()  # the next page shows the partition after the marker
        log.info("console: aborted the transaction of producer %d on %s-%d at offset %d (from %s%s)",
                 done["producer_id"], req[0], req[1], req[2], call.host, f", {s.principal}" if s else "")
        return Reply(200, done)


def parse_abort(body: bytes) -> tuple[str, int, int]:
    """An abort request's body -> (topic, partition, start offset). Raises ValueError saying
    what is wrong."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("the body is not JSON") from None
    if not isinstance(doc, dict):
        raise ValueError("expected a JSON object")
    topic, partition, start = doc.get("topic"), doc.get("partition"), doc.get("start_offset")
    if not isinstance(topic, str) or not 0 < len(topic) <= 249:
        raise ValueError("topic: expected a topic name")
    for name, v in (("partition", partition), ("start_offset", start)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**63:
            raise ValueError(f"{name}: expected a non-negative integer")
    return topic, partition, start  # type: ignore[return-value]
