"""The membership/metadata interface (issue 27, broker/membership/): one interface, two
implementations, each store a declared Protocol that both implement; the handlers, the dispatcher
and the listener contexts written against it, never against a mode.

The implementations satisfy the Protocols structurally (cluster/ and acl/ import nothing of the
broker), so these tests hold every one of them to its Protocol: the same methods, with the same
parameters, coroutine where the Protocol's is one."""

from __future__ import annotations

import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.membership import interface
from oncelog.clock import ManualClock
from oncelog.protocol.errors import ErrorCode

SRC = Path(oncelog.__file__).parent


def _members(proto: type) -> tuple[dict[str, Any], set[str]]:
    """(methods, data members) a Protocol declares, its bases' included."""
    methods: dict[str, Any] = {}
    data: set[str] = set()
    for cls in reversed(proto.__mro__):
        if cls is object or not getattr(cls, "_is_protocol", False) or cls.__name__ == "Protocol":
            continue
        data.update(getattr(cls, "__annotations__", {}))
        for name, value in vars(cls).items():
            if name.startswith("_"):
                continue
            if isinstance(value, property):
                data.add(name)
            elif callable(value):
                methods[name] = value
    return methods, data


def _conforms(impl: object, proto: type) -> list[str]:
    """What ``impl`` lacks or declares differently from ``proto``."""
    methods, data = _members(proto)
    wrong = []
    for name, want in methods.items():
        have = getattr(type(impl), name, None)
        if have is None:
            wrong.append(f"{name}: missing")
            continue
        if inspect.iscoroutinefunction(want) != inspect.iscoroutinefunction(have):
            wrong.append(f"{name}: coroutine or not")
        params = lambda f: [(p.name, p.kind) for p in inspect.signature(f).parameters.values()]  # noqa: E731
        if params(want) != params(have):
            wrong.append(f"{name}: {params(have)} != {params(want)}")
    for name in data:
        declared = any(name in getattr(c, "__annotations__", {}) for c in type(impl).__mro__)
        if not (hasattr(impl, name) or declared):
            wrong.append(f"{name}: missing")
    return wrong


@pytest.fixture
def config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(data_dir=str(tmp_path), node_id=3)


def _embedded(config: BrokerConfig) -> Any:
    from oncelog.broker.membership.embedded import EmbeddedMembership
    from oncelog.broker.partitions.replica_manager import ReplicaManager

    return EmbeddedMembership(config, ManualClock(), ReplicaManager(config, ManualClock()), lambda listener: ("h", 9092))


def _postgres(config: BrokerConfig) -> Any:
    from oncelog.broker.membership.postgres import StoreMembership
    from oncelog.broker.partitions.replica_manager import ReplicaManager

    def inter() -> Any:
        raise AssertionError("not called before open()")

    # nothing connects before open(): the store URL is never dialled here
    return StoreMembership("postgresql://nobody@127.0.0.1:1/none", config, ManualClock(),
                           ReplicaManager(config, ManualClock()), inter)


@pytest.mark.parametrize("make", [_embedded, _postgres], ids=["embedded", "postgres"])
def test_both_memberships_implement_the_interface_and_every_store(make: Any, config: BrokerConfig) -> None:
    m = make(config)
    assert _conforms(m, interface.Membership) == []
    assert _conforms(m.topics, interface.TopicStore) == []
    assert _conforms(m.configs, interface.ConfigStore) == []
    assert _conforms(m.users, interface.CredentialService) == []
    m.users.close()


def _hold_to_protocols(pairs: dict[type, tuple[type, ...]]) -> None:
    """Each class has its Protocol's methods: coroutine where the Protocol's is one, the same
    parameters."""
    for proto, impls in pairs.items():
        methods, _ = _members(proto)
        for impl in impls:
            for name, want in methods.items():
                have = getattr(impl, name, None)
                assert have is not None, f"{impl.__name__}.{name} ({proto.__name__})"
                assert inspect.iscoroutinefunction(have) == inspect.iscoroutinefunction(want), f"{impl.__name__}.{name}"
                assert list(inspect.signature(have).parameters) == list(inspect.signature(want).parameters), \
                    f"{impl.__name__}.{name}"


def test_every_store_protocol_has_both_implementations(tmp_path: Path) -> None:
    """ACLs, credentials and producer ids: the data dir's files and the PostgreSQL store's
    classes, held to one Protocol (no more telling them apart by ``getattr``)."""
    from oncelog.acl.file_store import AclFileStore
    from oncelog.broker.auth.credentials import UserCredentials
    from oncelog.broker.membership.cluster_credentials import StoreUserCredentials
    from oncelog.cluster.acls import StoreAcls
    from oncelog.cluster.producer_ids import StoreProducerIds
    from oncelog.coordinator.producer_ids import ProducerIdManager

    pairs = {
        interface.AclStore: (AclFileStore, StoreAcls),
        interface.CredentialService: (UserCredentials, StoreUserCredentials),
        interface.ProducerIdSource: (ProducerIdManager, StoreProducerIds),
    }
    _hold_to_protocols(pairs)
    store = AclFileStore(tmp_path)
    assert isinstance(store, interface.AclStore) and store.changed() is False  # one writer: never changed elsewhere


def test_what_differs_between_the_modes_has_both_implementations() -> None:
    """Issue 36: the coordinators' collaborators the membership chooses once (the share
    persister, the offset inbox, the transaction coordinator's remote side, the share members),
    each one Protocol with a class per mode, held to it the same way."""
    from oncelog.broker.coordinators.offset_inbox import NoInbox, OffsetInbox
    from oncelog.broker.coordinators.share_members import LocalShareMembers, RemoteShareMembers, ShareMembers
    from oncelog.broker.coordinators.share_persister import LogSharePersister, SharePersister
    from oncelog.broker.coordinators.share_store_persister import StoreSharePersister
    from oncelog.broker.coordinators.txn_remote import LocalOnly, TxnRemote
    from oncelog.broker.database.inbox import DatabaseInbox
    from oncelog.broker.partitions.txn_verifier import RemoteVerifier

    pairs = {
        TxnRemote: (LocalOnly, RemoteVerifier),
        OffsetInbox: (NoInbox, DatabaseInbox),
        SharePersister: (LogSharePersister, StoreSharePersister),
        ShareMembers: (LocalShareMembers, RemoteShareMembers),
    }
    assert all(_members(proto)[0] and not _members(proto)[1] for proto in pairs)
    _hold_to_protocols(pairs)


def test_the_embedded_node_is_the_whole_cluster(config: BrokerConfig) -> None:
    """What the handlers used to answer in their embedded branches, now the embedded
    implementation's: this node on the listener's address, leader of everything at epoch 0,
    the controller, nothing to elect, no other leader to name."""
    from oncelog.broker.membership import Node
    from oncelog.types import TopicPartition

    m = _embedded(config)
    tp = TopicPartition("t", 0)
    assert m.nodes("PLAINTEXT") == [Node(3, "h", 9092, None)]
    assert m.node(3, "PLAINTEXT") == Node(3, "h", 9092, None) and m.node(4, "PLAINTEXT") is None
    assert m.leader(tp) == (3, 0) and m.leader_hint(tp) is None and m.controller_id() == 3
    election = asyncio.run(m.elect_preferred())
    assert election.moved == () and election.outcome(tp)[0] == ErrorCode.election_not_needed


def test_an_election_outcome_per_partition() -> None:
    from oncelog.types import TopicPartition

    a, b, c = (TopicPartition("t", i) for i in range(3))
    e = interface.Election("placed", moved=(a,), led=frozenset({a, b}))
    assert e.outcome(a) == (ErrorCode.none, None)
    assert e.outcome(b) == (ErrorCode.election_not_needed, "placed")
    assert e.outcome(c)[0] == ErrorCode.preferred_leader_not_available


def test_handlers_and_dispatch_never_ask_which_mode() -> None:
    """Zero ``cluster is None`` / ``is not None`` branches, no ``getattr`` for a service the
    context does not declare, and one routing table (issue 27)."""
    paths = [*(SRC / "broker" / "handlers").glob("*.py"), SRC / "broker" / "network" / "dispatch.py",
             SRC / "broker" / "broker.py"]
    bad = {}
    for path in [*paths, SRC / "broker" / "observability" / "observe.py"]:
        found = re.findall(r"cluster is (?:not )?None|broker\.cluster\b|CLUSTER_ROUTES", path.read_text())
        if found:
            bad[path.name] = found
    for path in paths:
        found = re.findall(r"getattr\((?:self\.)?broker, \"\w+\"|__getattr__", path.read_text())
        if found:
            bad[path.name] = bad.get(path.name, []) + found
    assert not bad
    assert not (SRC / "broker" / "cluster_routes.py").exists()


def test_every_listener_context_declares_the_whole_broker_context(config: BrokerConfig) -> None:
    """The handlers of a further listener get a ``ListenerContext``: each member of
    ``BrokerContext`` is declared on it (not found by ``__getattr__``) and reads the broker's,
    except the advertised address, which is the listener's."""
    from oncelog.broker.broker import Broker, ListenerContext
    from oncelog.broker.context import BrokerContext

    methods, data = _members(BrokerContext)
    declared = {n for c in ListenerContext.__mro__ for n in vars(c)}
    assert not (set(methods) | data) - declared
    assert "__getattr__" not in declared
    cfg = BrokerConfig(data_dir=config.data_dir, node_id=3, port=0,
                       listeners="PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
                       listener_security_protocol_map="PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
                       advertised_listeners="PLAINTEXT://a.example:1,OTHER://b.example:2")
    broker = Broker(cfg)
    view = ListenerContext(broker, broker.listeners[1], broker.servers[1])
    for name in data - {"groups", "transactions", "shares", "producer_ids", "advertised_host", "advertised_port",
                        "listener_name"}:  # made by start() (coordinators, producer ids), or the listener's own
        assert getattr(view, name) is getattr(broker, name), name
    assert (view.listener_name, view.advertised_host, view.advertised_port) == ("OTHER", "b.example", 2)
    assert [(n.host, n.port) for n in broker.metadata.nodes("OTHER")] == [("b.example", 2)]
    assert [(n.host, n.port) for n in broker.metadata.nodes("PLAINTEXT")] == [("a.example", 1)]


def test_one_routing_table_in_both_modes(config: BrokerConfig) -> None:
    """Embedded and cluster member route and advertise the same table, ``routes.ROUTES``; a
    cluster member's share groups keep their state in the store. Nothing connects to the store
    before ``start()``."""
    from oncelog.broker.broker import Broker
    from oncelog.broker.routes import ROUTES

    embedded = Broker(config)
    member = Broker(config, store="postgresql://nobody@127.0.0.1:1/none")
    assert embedded.dispatcher.routes is ROUTES and member.dispatcher.routes is ROUTES
    assert embedded.advertised_versions() == member.advertised_versions()
    assert (embedded.membership.mode, member.membership.mode) == ("embedded", "cluster")
    member.membership.users.close()
