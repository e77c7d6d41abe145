"""What consumer groups subscribe to, resolved once per change (coordinator/group/subscriptions.py;
R22): the versioned topic image, regex resolutions that follow it by the names born since and
in budgeted steps, the bounded compile cache, members' names found once; and in the group, a
heartbeat that changes nothing matches nothing. Pure: no broker."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.coordinator.group import assignors
from oncelog.coordinator.group import consumer_group as cg
from oncelog.coordinator.group import subscriptions as subs
from oncelog.protocol.errors import InvalidRegularExpression, InvalidRequest


def _ids(*names: str) -> dict[str, tuple[uuid.UUID, int]]:
    return {n: (uuid.uuid5(uuid.NAMESPACE_DNS, n), 1) for n in names}


def test_an_image_knows_which_names_are_new_since_any_version() -> None:
    v0 = subs.TopicImage(_ids("a", "b"), 0)
    v1 = subs.TopicImage.following({**_ids("a", "b"), **_ids("c")}, v0)
    assert subs.TopicImage.following(dict(v1.topics), v1) is v1  # unchanged: the same image
    recreated = {**_ids("a", "c"), "b": (uuid.uuid4(), 1)}  # b deleted and created again
    v2 = subs.TopicImage.following(recreated, v1)
    assert (v0.version, v1.version, v2.version) == (0, 1, 2)
    assert sorted(v2.born_after(-1)) == ["a", "b", "c"]
    assert v2.born_after(0) == ["c", "b"] and v2.born_after(1) == ["b"] and v2.born_after(2) == []
    assert v2.born("a") == 0 and v2.born("b") == 2 and v2.born("gone") is None


def test_a_resolution_follows_the_image_by_the_names_born_since() -> None:
    r = subs.RegexResolution(users=1)
    v0 = subs.TopicImage(_ids("rx-1", "other", "__internal-rx"), 0)
    assert subs.refresh({"rx-.*": r}, v0, None) == (True, {"rx-.*"})
    assert r.names == {"rx-1"} and r.version == 0
    v1 = subs.TopicImage.following({**_ids("rx-2", "other")}, v0)  # rx-1 deleted, rx-2 created
    assert subs.refresh({"rx-.*": r}, v1, None) == (True, {"rx-.*"})
    assert r.names == {"rx-2"}
    assert subs.refresh({"rx-.*": r}, v1, None) == (True, set())  # up to date: no work at all


def test_topics_the_member_may_not_describe_are_left_out() -> None:
    r = subs.RegexResolution(users=1)
    image = subs.TopicImage(_ids("rx-open", "rx-secret"), 0)
    subs.refresh({"rx-.*": r}, image, lambda name: name != "rx-secret")
    assert r.names == {"rx-open"}


def test_a_refresh_past_its_budget_goes_on_at_the_next_heartbeat() -> None:
    image = subs.TopicImage(_ids(*(f"t-{i:04d}" for i in range(3_000))), 0)
    regexes = {f"t-{k}.*": subs.RegexResolution(users=1) for k in range(10)}
    steps = 0
    while True:
        steps += 1
        done, _changed = subs.refresh(regexes, image, None, budget=2_000)
        if done:
            break
        assert steps < 100
    assert steps > 3  # it took several heartbeats, each bounded
    assert regexes["t-1.*"].names == {f"t-{i:04d}" for i in range(1_000, 2_000)}
    assert all(r.version == 0 and r.todo is None for r in regexes.values())


def test_the_compile_cache_is_bounded_and_remembers_refusals() -> None:
    cache = subs._CompileCache(budget=1_000, max_patterns=1_000)
    for i in range(200):
        cache.get(f"topic-{i}-(a|b|c)[0-9]{{2,4}}")
        assert cache.cost <= 1_000
    assert len(cache) < 200
    refused, cached = cache.get("(?=x)")
    assert isinstance(refused, InvalidRegularExpression) and not cached
    assert cache.get("(?=x)") == (refused, True)


@pytest.mark.parametrize("pattern", ["x" * (subs.MAX_REGEX_BYTES + 1), "é" * 20_000, "([a-z]{1,100}-[0-9]{1,100}){1,1000}"],
                         ids=["32k+1", "40k-bytes", "huge-program"])
def test_regexes_past_the_bounds_are_refused(pattern: str) -> None:
    """Longer than a record string holds (UTF-8 bytes), or a program larger than RE2_MAX_MEM allows."""
    with pytest.raises(InvalidRegularExpression):
        subs.compile_regex(pattern)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.sampled_from([f"n{i}" for i in range(12)]), max_size=12), min_size=1, max_size=6),
       st.sets(st.sampled_from([f"n{i}" for i in range(12)]), max_size=12))
def test_names_found_incrementally_equal_names_found_from_scratch(images: list[set[str]], wanted: set[str]) -> None:
    names = tuple(sorted(wanted))
    image = None
    known: frozenset[str] = frozenset()
    version = -1
    for topics in images:
        image = subs.TopicImage.following(_ids(*topics), image)
        known = subs.member_names(names, known, version, image)
        version = image.version
        assert known == frozenset(wanted & topics)


def _req(member: str, epoch: int, *, regex: str | None = None, names: tuple[str, ...] | None = None,
         owned: cg.Assignment | None = None) -> cg.HeartbeatRequest:
    return cg.HeartbeatRequest(group_id="g", member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
                               rebalance_timeout_ms=30_000, subscribed_names=names, subscribed_regex=regex,
                               server_assignor=None, owned={} if epoch == 0 else owned)


def test_a_heartbeat_that_changes_nothing_matches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    groups = cg.ConsumerGroups(cg.ConsumerSettings(), lambda: "x")
    image = subs.TopicImage(_ids(*(f"rt-{i:03d}" for i in range(200))), 0)
    answers = {f"m{i}": groups.heartbeat(_req(f"m{i}", 0, regex=f"rt-{i:03d}|rt-1.*"), image, 0) for i in range(20)}

    def no_matching(*_a: object) -> None:
        raise AssertionError("a regex was compiled or matched at a heartbeat that changes nothing")

    monkeypatch.setattr(subs.CACHE, "get", no_matching)
    monkeypatch.setattr(subs, "subscriptions_of", no_matching)
    for _ in range(3):
        for mid, a in answers.items():
            answers[mid] = groups.heartbeat(_req(mid, a.member_epoch, owned=a.assignment), image, 1)
    # a new topic: only it is matched against each regex (no recompiling of cached ones either)
    monkeypatch.undo()
    grown = subs.TopicImage.following({**image.topics, **_ids("rt-1000")}, image)
    a = groups.heartbeat(_req("m0", answers["m0"].member_epoch, owned=answers["m0"].assignment), grown, 2)
    group = groups.groups["g"]
    assert "rt-1000" in group.subscribed_topics and a.member_epoch > answers["m0"].member_epoch


def test_strings_no_record_can_hold_are_refused_before_the_group_changes() -> None:
    groups = cg.ConsumerGroups(cg.ConsumerSettings(), lambda: "x")
    image = subs.TopicImage(_ids("t"), 0)
    long = "x" * (cg.MAX_STRING_BYTES + 1)
    for bad in (_req(long, 0, names=("t",)), _req("m", 0, names=("t", long)),
                _req("m", 0, names=tuple(f"name-{i:07d}" for i in range(90_000)))):
        with pytest.raises(InvalidRequest):
            groups.heartbeat(bad, image, 0)
    assert groups.groups == {}
    with pytest.raises(InvalidRequest):
        groups.heartbeat(cg.HeartbeatRequest("g", "m", 0, "i" * 40_000, None, 30_000, ("t",), None, None, {}), image, 0)
    assert groups.groups == {}


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["join", "beat", "leave", "change", "topics"]), st.integers(0, 5),
                          st.sets(st.sampled_from(["a", "b", "c", "d"]), min_size=1), st.booleans()),
                min_size=1, max_size=30))
def test_what_the_group_keeps_equals_what_it_would_compute_from_scratch(ops: list) -> None:
    """Whatever members do (join by names or regex, leave, change subscription, topics come and
    go), the group's subscribed topics and its subscriber index equal those computed anew."""
    groups = cg.ConsumerGroups(cg.ConsumerSettings(), lambda: "x")
    image = subs.TopicImage(_ids("a", "b"), 0)
    epochs: dict[str, cg.HeartbeatAnswer] = {}
    for op, k, names, by_regex in ops:
        mid = f"m{k}"
        regex = "|".join(sorted(names)) if by_regex else None
        try:
            if op == "topics":
                image = subs.TopicImage.following(_ids(*names), image)
                if epochs:
                    mid = sorted(epochs)[0]
                    epochs[mid] = groups.heartbeat(_req(mid, epochs[mid].member_epoch, owned=epochs[mid].assignment),
                                                   image, 0)
            elif op == "join" and mid not in epochs:
                epochs[mid] = groups.heartbeat(_req(mid, 0, regex=regex, names=None if by_regex else tuple(names)),
                                               image, 0)
            elif op == "leave" and mid in epochs:
                groups.heartbeat(_req(mid, -1), image, 0)
                del epochs[mid]
            elif op in ("beat", "change") and mid in epochs:
                a = epochs[mid]
                change = {"regex": regex or "", "names": None if by_regex else tuple(names)} if op == "change" else {}
                epochs[mid] = groups.heartbeat(_req(mid, a.member_epoch, owned=a.assignment, **change), image, 0)
        except InvalidRequest:
            continue
        group = groups.groups.get("g")
        if group is None:
            continue
        expect = {m.member_id: assignors._subscribed(m, image.topics) for m in group.members.values()}
        if not group.stale:  # (a leave recomputes them at the group's next heartbeat)
            assert set(group.subscribed_topics) == set().union(set(), *expect.values())
        if group.index is not None:
            assert group.index == assignors.subscribers(expect)
