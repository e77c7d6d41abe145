"""The pure authorizer (issue 18): Kafka's StandardAuthorizer rules on the indexed bindings, the
filters of DescribeAcls/DeleteAcls, validation, and the per-API rules table."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.acl.authorizer import Authorizer, AuthorizerSettings, parse_super_users
from oncelog.acl.model import (
    SUPPORTED_OPERATIONS, AclBinding, AclFilter, AclOperation as Op, PatternType as P, PermissionType as Perm,
    ResourceType as R,
)
from oncelog.acl.rules import RULES
from oncelog.broker.routes import ROUTES
from oncelog.protocol.errors import InvalidRequest

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(rt: R, name: str, op: Op, perm: Perm = Perm.ALLOW, principal: str = ALICE, host: str = "*",
        pt: P = P.LITERAL) -> AclBinding:
    return AclBinding(rt, name, pt, principal, host, op, perm)


def az(*bindings: AclBinding, supers: str = "", everyone: bool = False) -> Authorizer:
    return Authorizer(AuthorizerSettings(parse_super_users(supers), everyone), bindings)


def test_literal_allow_and_default_deny() -> None:
    a = az(acl(R.TOPIC, "t", Op.READ))
    assert a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "t")
    assert not a.authorize(BOB, HOST, Op.READ, R.TOPIC, "t")
    assert not a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "t")
    assert not a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "t2")
    assert not a.authorize(ALICE, HOST, Op.READ, R.GROUP, "t")


def test_implied_operations() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert az(acl(R.TOPIC, "t", op)).authorize(ALICE, HOST, Op.DESCRIBE, R.TOPIC, "t"), op
    assert not az(acl(R.TOPIC, "t", Op.CREATE)).authorize(ALICE, HOST, Op.DESCRIBE, R.TOPIC, "t")
    assert az(acl(R.TOPIC, "t", Op.ALTER_CONFIGS)).authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, R.TOPIC, "t")
    assert not az(acl(R.TOPIC, "t", Op.DESCRIBE)).authorize(ALICE, HOST, Op.READ, R.TOPIC, "t")
    a = az(acl(R.TOPIC, "t", Op.ALL))
    assert all(a.authorize(ALICE, HOST, op, R.TOPIC, "t") for op in SUPPORTED_OPERATIONS[R.TOPIC])
    # a DENY of READ does not deny DESCRIBE (implication is for ALLOW only), a DENY of ALL does
    a = az(acl(R.TOPIC, "t", Op.ALL), acl(R.TOPIC, "t", Op.READ, Perm.DENY))
    assert not a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "t")
    assert a.authorize(ALICE, HOST, Op.DESCRIBE, R.TOPIC, "t")
    assert not az(acl(R.TOPIC, "t", Op.READ), acl(R.TOPIC, "t", Op.ALL, Perm.DENY)).authorize(
        ALICE, HOST, Op.DESCRIBE, R.TOPIC, "t")


def test_wildcards_prefixes_hosts_super_users() -> None:
    a = az(acl(R.TOPIC, "*", Op.READ, principal="User:*"))
    assert a.authorize(BOB, HOST, Op.READ, R.TOPIC, "anything")
    a = az(acl(R.TOPIC, "orders-", Op.WRITE, pt=P.PREFIXED))
    assert a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "orders-eu")
    assert a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "orders-")
    assert not a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "orders")
    assert not a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "xorders-eu")
    a = az(acl(R.GROUP, "g", Op.READ, host="10.0.0.1"))
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, R.GROUP, "g")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, R.GROUP, "g")
    a = az(acl(R.TOPIC, "t", Op.ALL, Perm.DENY, principal="User:admin"), supers="User:admin; User:bob")
    assert a.authorize("User:admin", HOST, Op.DELETE, R.TOPIC, "t")  # super users ignore DENY
    assert a.authorize(BOB, HOST, Op.CLUSTER_ACTION, R.CLUSTER, "kafka-cluster")


def test_allow_everyone_if_no_acl_found() -> None:
    a = az(acl(R.TOPIC, "t", Op.READ), everyone=True)
    assert a.authorize(BOB, HOST, Op.WRITE, R.TOPIC, "other")  # no ACL on "other"
    assert not a.authorize(BOB, HOST, Op.WRITE, R.TOPIC, "t")  # an ACL exists on "t", not for bob
    assert not az(acl(R.TOPIC, "t", Op.READ)).authorize(BOB, HOST, Op.WRITE, R.TOPIC, "other")


def test_authorize_any_resource_type() -> None:
    """Kafka's authorizeByResourceType (InitProducerId without transactional id)."""
    assert not az().authorize_any(ALICE, HOST, Op.WRITE, R.TOPIC)
    assert az(acl(R.TOPIC, "t", Op.WRITE)).authorize_any(ALICE, HOST, Op.WRITE, R.TOPIC)
    assert not az(acl(R.TOPIC, "t", Op.READ)).authorize_any(ALICE, HOST, Op.WRITE, R.TOPIC)
    assert not az(acl(R.TOPIC, "t", Op.WRITE), acl(R.TOPIC, "t", Op.WRITE, Perm.DENY)).authorize_any(
        ALICE, HOST, Op.WRITE, R.TOPIC)
    assert not az(acl(R.TOPIC, "abc", Op.WRITE), acl(R.TOPIC, "ab", Op.WRITE, Perm.DENY, pt=P.PREFIXED)).authorize_any(
        ALICE, HOST, Op.WRITE, R.TOPIC)
    assert az(acl(R.TOPIC, "abc", Op.WRITE), acl(R.TOPIC, "x", Op.WRITE, Perm.DENY, pt=P.PREFIXED)).authorize_any(
        ALICE, HOST, Op.WRITE, R.TOPIC)
    assert not az(acl(R.TOPIC, "*", Op.WRITE), acl(R.TOPIC, "*", Op.ALL, Perm.DENY)).authorize_any(
        ALICE, HOST, Op.WRITE, R.TOPIC)
    assert az(supers=ALICE).authorize_any(ALICE, HOST, Op.WRITE, R.TOPIC)


def test_operations_bitfield() -> None:
    a = az(acl(R.GROUP, "g", Op.READ))
    assert a.operations(ALICE, HOST, R.GROUP, "g") == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert a.operations(BOB, HOST, R.GROUP, "g") == 0


def test_two_phase_commit_operation() -> None:
    """KIP-939's TWO_PHASE_COMMIT on a transactional id: answered like any other operation."""
    a = az(acl(R.TRANSACTIONAL_ID, "tx", Op.TWO_PHASE_COMMIT))
    assert a.authorize(ALICE, HOST, Op.TWO_PHASE_COMMIT, R.TRANSACTIONAL_ID, "tx")
    assert not a.authorize(ALICE, HOST, Op.WRITE, R.TRANSACTIONAL_ID, "tx")
    assert a.authorize(ALICE, HOST, Op.DESCRIBE, R.TRANSACTIONAL_ID, "tx") is False  # not implied


def test_validation() -> None:
    AclBinding.of(4, "kafka-cluster", 3, ALICE, "*", int(Op.ALTER), 3)
    for bad in [(4, "other", 3, ALICE, "*", 7, 3), (2, "", 3, ALICE, "*", 3, 3), (2, "t", 2, ALICE, "*", 3, 3),
                (2, "t", 3, "alice", "*", 3, 3), (2, "t", 3, ALICE, "*", 1, 3), (2, "t", 3, ALICE, "*", 3, 1),
                (9, "t", 3, ALICE, "*", 3, 3)]:
        with pytest.raises(InvalidRequest):
            AclBinding.of(*bad)
    with pytest.raises(InvalidRequest):
        AclFilter.of(0, None, 1, None, None, 1, 1)
    # as Kafka's broker: an operation the type does not support is stored, and never matches
    b = AclBinding.of(3, "g", 3, ALICE, "*", int(Op.WRITE), 3)
    assert not az(b).authorize(ALICE, HOST, Op.READ, R.GROUP, "g")


def test_filters() -> None:
    lit = acl(R.TOPIC, "orders-eu", Op.READ)
    pre = acl(R.TOPIC, "orders-", Op.WRITE, pt=P.PREFIXED)
    star = acl(R.TOPIC, "*", Op.DESCRIBE)
    grp = acl(R.GROUP, "orders-eu", Op.READ)
    a = az(lit, pre, star, grp)

    def f(rt: R = R.ANY, name: str | None = None, pt: P = P.ANY, principal: str | None = None) -> set[AclBinding]:
        return set(a.matching(AclFilter(rt, name, pt, principal, None, Op.ANY, Perm.ANY)))

    assert f() == {lit, pre, star, grp}
    assert f(R.TOPIC, "orders-eu", P.MATCH) == {lit, pre, star}
    assert f(R.TOPIC, "orders-eu", P.ANY) == {lit}
    assert f(R.TOPIC, "orders-", P.PREFIXED) == {pre}
    assert f(R.TOPIC, "orders-", P.LITERAL) == set()
    assert f(principal=BOB) == set()


def test_every_route_has_rules() -> None:
    assert set(RULES) == set(ROUTES)
    for key, rules in RULES.items():
        for role, need in rules.items():
            assert need.operation in SUPPORTED_OPERATIONS[need.resource], (key, role)


# -- properties ---------------------------------------------------------------------------------

names = st.text(alphabet="abc-", min_size=1, max_size=6)
principals = st.sampled_from([ALICE, BOB, "User:*"])
hosts = st.sampled_from(["*", HOST, "10.0.0.2"])
ops = st.sampled_from([o for o in Op if o not in (Op.ANY, Op.UNKNOWN)])
bindings = st.builds(acl, st.sampled_from([R.TOPIC, R.GROUP]), names, ops, st.sampled_from([Perm.ALLOW, Perm.DENY]),
                     principals, hosts, st.sampled_from([P.LITERAL, P.PREFIXED]))


def _applies(b: AclBinding, principal: str, host: str, rt: R, name: str) -> bool:
    """The specification, stated independently of the index: does ``b`` apply to the request?"""
    if b.resource_type != rt or b.principal not in (principal, "User:*") or b.host not in (host, "*"):
        return False
    if b.pattern_type == P.LITERAL:
        return b.name in (name, "*")
    return name.startswith(b.name)


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=12), names, ops, st.sampled_from([ALICE, BOB]), st.sampled_from([HOST, "10.0.0.2"]),
       st.booleans())
def test_index_agrees_with_the_specification(bs, name, op, principal, host, everyone) -> None:  # type: ignore[no-untyped-def]
    """The indexed decision equals a scan of every binding; DENY always wins."""
    a = az(*bs, everyone=everyone)
    applicable = [b for b in bs if _applies(b, principal, host, R.TOPIC, name)]
    any_on_resource = [b for b in bs if b.resource_type == R.TOPIC and
                       (b.name in (name, "*") if b.pattern_type == P.LITERAL else name.startswith(b.name))]
    if any(b.permission == Perm.DENY and b.operation in (op, Op.ALL) for b in applicable):
        expected = False
    elif any(b.permission == Perm.ALLOW and (b.operation in (op, Op.ALL) or
             (op == Op.DESCRIBE and b.operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER)) or
             (op == Op.DESCRIBE_CONFIGS and b.operation == Op.ALTER_CONFIGS)) for b in applicable):
        expected = True
    else:
        expected = everyone and not any_on_resource
    assert a.authorize(principal, host, op, R.TOPIC, name) is expected


@settings(max_examples=200, deadline=None)
@given(st.lists(bindings, max_size=10), names, ops)
def test_deny_all_wins_over_any_allow(bs, name, op) -> None:  # type: ignore[no-untyped-def]
    """Adding a DENY ALL for the principal on the exact resource denies every operation, whatever else."""
    a = az(*bs, acl(R.TOPIC, name, Op.ALL, Perm.DENY, principal=ALICE, host="*"), everyone=True)
    assert not a.authorize(ALICE, HOST, op, R.TOPIC, name)


@settings(max_examples=200, deadline=None)
@given(names, names)
def test_prefix_matches_exactly_the_names_it_starts(prefix, name) -> None:  # type: ignore[no-untyped-def]
    a = az(acl(R.TOPIC, prefix, Op.READ, pt=P.PREFIXED))
    assert a.authorize(ALICE, HOST, Op.READ, R.TOPIC, name) is name.startswith(prefix)
    assert (set(a.matching(AclFilter(R.TOPIC, name, P.MATCH, None, None, Op.ANY, Perm.ANY))) != set()) is \
        name.startswith(prefix)


@settings(max_examples=100, deadline=None)
@given(st.lists(bindings, max_size=10))
def test_json_round_trip(bs) -> None:  # type: ignore[no-untyped-def]
    valid = []
    for b in bs:
        try:
            b.validate()
            valid.append(b)
        except InvalidRequest:
            pass
    assert {AclBinding.from_json(b.to_json()) for b in valid} == set(valid)


def test_docs_carry_the_rules_table() -> None:
    from pathlib import Path

    from oncelog.acl.rules import table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "ACLS.md").read_text()
    assert table() in doc, "docs/ACLS.md: paste oncelog.acl.rules.table() into 'What each API needs'"
