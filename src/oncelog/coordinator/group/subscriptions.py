"""What the members of a consumer group (KIP-848) subscribe to, resolved once per change: the
topic image, the subscription regexes (RE2) and their bounded compile cache, and the matching
work, done when a subscription or the topics change and never at a heartbeat that changes
nothing (Kafka's GroupMetadataManager keeps resolved regular expressions and a subscribed-topic
count for the same reason).

* ``TopicImage``: the topics a consumer group may subscribe to (name -> topic id, partition
  count) at one version, with the version at which each name appeared, so the names that are
  new since any older version are found without scanning (``born_after``). The coordinator
  builds one per change of the broker's topics; every group of every shard shares it.
* Regexes: a subscription regex is at most ``MAX_REGEX_BYTES`` (32,767: the longest string a
  ``__consumer_offsets`` record holds, and Kafka's request parser refuses longer ones) and
  compiles within ``RE2_MAX_MEM`` (RE2 refuses a larger program: "pattern too large"), else
  INVALID_REGULAR_EXPRESSION before anything changes. Compiled regexes are kept in a cache
  bounded by their RE2 program sizes (``CACHE_PROGRAM_BUDGET``) and count; a refusal is cached
  too (a client repeating a bad pattern is not compiled again).
* ``RegexResolution``: the topic names one regex of a group matches, complete for a version of
  the image. When the image moves on, only the names born since are matched; when a regex is
  new to the group (or at a periodic full refresh, which picks up ACL changes) every name is.
  The work is done in steps of at most ``REFRESH_BUDGET`` units per heartbeat (a unit is about
  half a microsecond: compiling costs the pattern's length, matching a name a little more than
  the pattern's length / 1,024), so a group with hundreds of large regexes spreads a refresh
  over its members' heartbeats instead of stopping the broker for seconds.
* Names a member subscribes to by name are looked up in the image when its subscription or the
  image changes: its whole list once, then only the names born since (a binary search in its
  sorted names), ``member_names``.

Topics a regex matches are filtered by ``may_describe`` (the heartbeating member's DESCRIBE on
the topic, when ACLs are on), as Kafka's ``filterTopicDescribeAuthorizedTopics`` filters each
resolution with the context of the member whose heartbeat triggered it.

The group's side of it (``derive``, ``set_regex``, ``refresh_topics``, ``subscriptions_of``) keeps
what the state machine (consumer_group.py) derives from its members: the regexes in use and
their users, each member's names found in the image, the subscribed topics and the
topic -> subscribers index the assignors take (kept up to date as members join).

Pure and synchronous: no I/O.
"""

from __future__ import annotations

import bisect
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol

import re2  # google-re2: the RE2 library Kafka's RE2/J ports

from oncelog.protocol.errors import InvalidRegularExpression

__all__ = ["CACHE_PROGRAM_BUDGET", "MAX_REGEX_BYTES", "REFRESH_BUDGET", "RE2_MAX_MEM", "RegexResolution",
           "TopicImage", "compile_regex", "derive", "member_names", "member_topics", "refresh", "refresh_topics",
           "set_regex", "subscriptions_of"]

#: the longest subscription regex, in UTF-8 bytes: what a record string holds (Kafka's parser
#: refuses any longer protocol string)
MAX_REGEX_BYTES = 0x7FFF
#: RE2's memory budget for one compiled regex (program, reverse program and DFA caches); a
#: pattern whose program does not fit is refused ("pattern too large - compile failed")
RE2_MAX_MEM = 1 << 20
#: the compile cache keeps at most this many RE2 instructions in all (about 16-32 bytes each)
CACHE_PROGRAM_BUDGET = 1 << 18
#: and at most this many patterns
CACHE_MAX_PATTERNS = 1_024
#: work units (~0.5 us each) one heartbeat may spend on other members' regexes
REFRESH_BUDGET = 40_000
#: a step of a resolution matches at least this many names (so it always progresses)
MIN_STEP_NAMES = 64
#: Kafka's group.consumer.regex.refresh.interval.ms default: every regex of a group is resolved
#: again from scratch this often (new ACLs apply), in budgeted steps
FULL_REFRESH_MS = 600_000

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a client's bad pattern is its error answer, not a broker log line
_RE2_OPTIONS.max_mem = RE2_MAX_MEM
#: RE2 (C++) syntax that RE2/J, which Kafka uses, does not have: ``\C`` (any byte)
_NOT_RE2J = ("\\C",)


# -- the topic image --------------------------------------------------------------------------------


class TopicImage:
    """The topics consumer groups may subscribe to (internal ones are not given), as of
    ``version`` (versions grow with each change). A name is *born* at the version it appeared
    (or came back with another topic id); ``previous`` carries the births of names it already had."""

    __slots__ = ("topics", "version", "_born", "_order", "_versions")

    def __init__(self, topics: Mapping[str, tuple[uuid.UUID, int]], version: int,
                 previous: "TopicImage | None" = None) -> None:
        self.topics: dict[str, tuple[uuid.UUID, int]] = dict(topics)
        self.version = version
        born: dict[str, int] = {}
        order: list[tuple[int, str]] = []
        if previous is not None:
            for v, name in previous._order:  # in birth order already
                now, then = self.topics.get(name), previous.topics.get(name)
                if now is not None and then is not None and now[0] == then[0]:
                    born[name] = v
                    order.append((v, name))
        for name in self.topics:
            if name not in born:
                born[name] = version
                order.append((version, name))
        self._born = born
        self._order = order
        self._versions = [v for v, _ in order]

    def born(self, name: str) -> int | None:
        """The version ``name`` appeared at (None: not a topic now)."""
        return self._born.get(name)

    def born_after(self, version: int) -> list[str]:
        """The names that appeared after ``version`` (every name for -1)."""
        i = bisect.bisect_right(self._versions, version)
        return [name for _v, name in self._order[i:]]

    @classmethod
    def following(cls, topics: Mapping[str, tuple[uuid.UUID, int]], previous: "TopicImage | None") -> "TopicImage":
        """``previous`` again when ``topics`` equals it, else the next version."""
        if previous is not None and previous.topics == topics:
            return previous
        return cls(topics, 0 if previous is None else previous.version + 1, previous)


# -- regexes -----------------------------------------------------------------------------------------


class _CompileCache:
    """Compiled regexes (or the refusal) by pattern, least recently used first out, bounded by
    the sum of their RE2 program sizes and by count."""

    def __init__(self, budget: int, max_patterns: int) -> None:
        self.budget, self.max_patterns = budget, max_patterns
        self._entries: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self.cost = 0

    def get(self, pattern: str) -> tuple[Any, bool]:
        """(compiled regex or an InvalidRegularExpression, whether it was cached)."""
        hit = self._entries.get(pattern)
        if hit is not None:
            self._entries.move_to_end(pattern)
            return hit[0], True
        compiled = _compile(pattern)
        cost = max(1, compiled.programsize) if not isinstance(compiled, InvalidRegularExpression) else 1
        self._entries[pattern] = (compiled, cost)
        self.cost += cost
        while self._entries and (self.cost > self.budget or len(self._entries) > self.max_patterns):
            _p, (_c, gone) = self._entries.popitem(last=False)
            self.cost -= gone
        return compiled, False

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.cost = 0


def _compile(pattern: str) -> Any:
    shown = pattern if len(pattern) <= 100 else pattern[:100] + "..."
    if not pattern:
        return InvalidRegularExpression("the subscription regex is empty")
    if len(pattern) * 4 > MAX_REGEX_BYTES and len(pattern.encode("utf-8", "surrogatepass")) > MAX_REGEX_BYTES:
        return InvalidRegularExpression(f"a regex of {len(pattern)} characters is longer than {MAX_REGEX_BYTES} bytes")
    if any(s in pattern for s in _NOT_RE2J):
        return InvalidRegularExpression(f"regex {shown!r} uses syntax RE2/J does not have")
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        return InvalidRegularExpression(f"regex {shown!r} is not valid: {reason}")


CACHE = _CompileCache(CACHE_PROGRAM_BUDGET, CACHE_MAX_PATTERNS)


def compile_regex(pattern: str) -> Any:
    """The subscription regex, compiled by RE2 (linear-time matching, as Kafka's RE2/J: no
    pattern can make matching a topic name slow) and matched against whole topic names as
    RE2/J's ``matches()`` does (``fullmatch``). Raises InvalidRegularExpression for a pattern RE2
    refuses (lookaround, backreferences, possessive quantifiers, too large a program, ...), one
    longer than ``MAX_REGEX_BYTES`` or one using RE2 syntax RE2/J lacks."""
    compiled, _cached = CACHE.get(pattern)
    if isinstance(compiled, InvalidRegularExpression):
        raise InvalidRegularExpression(str(compiled))
    return compiled


def _match_cost(pattern: str) -> int:
    return 2 + len(pattern) // 1_024


@dataclass(slots=True)
class RegexResolution:
    """One regex of a group: how many members use it, the names it matched, the image version
    they are complete for (-1: never resolved), and a resolution under way (``todo`` names left
    to match for ``todo_version``; ``partial`` what matched so far)."""

    users: int = 0
    names: frozenset[str] = frozenset()
    version: int = -1
    todo: list[str] | None = None
    todo_version: int = -1
    partial: set[str] = field(default_factory=set)

    def restart(self) -> None:
        """Resolve from scratch at the next step (a periodic full refresh)."""
        self.version, self.todo = -1, None


def _step(pattern: str, r: RegexResolution, image: TopicImage, may_describe: Callable[[str], bool] | None,
          budget: int) -> int:
    """Advance ``r`` towards ``image``; returns the budget left (negative: overspent by the
    last unit of work). Completes ``r`` (``version`` = the todo's) when its todo empties."""
    if r.todo is None:
        if r.version >= image.version:
            return budget
        if r.version < 0:
            r.partial = set()
            r.todo = image.born_after(-1)
        else:  # what still matches and did not come back as another topic, then the new names
            r.partial = {n for n in r.names if (b := image.born(n)) is not None and b <= r.version}
            r.todo = image.born_after(r.version)
        r.todo_version = image.version
        r.todo.reverse()  # consumed from the end
    rx, cached = CACHE.get(pattern)
    if not cached:
        budget -= len(pattern)
    if isinstance(rx, InvalidRegularExpression):  # validated when it arrived: cannot happen
        r.todo = []
    each = _match_cost(pattern)
    todo = r.todo
    floor = len(todo) - MIN_STEP_NAMES  # a step matches some names whatever it cost to compile
    while todo and (budget > 0 or len(todo) > floor):
        name = todo.pop()
        budget -= each
        if not name.startswith("__") and rx.fullmatch(name) and (may_describe is None or may_describe(name)):
            r.partial.add(name)
    if not todo:
        r.names, r.version, r.todo, r.partial = frozenset(r.partial), r.todo_version, None, set()
    return budget


def refresh(regexes: Mapping[str, RegexResolution], image: TopicImage, may_describe: Callable[[str], bool] | None,
            first: str | None = None, budget: int = REFRESH_BUDGET) -> tuple[bool, set[str]]:
    """Advance the group's regex resolutions towards ``image``: ``first`` (the heartbeating
    member's regex) completely, the others within ``budget``. Returns (whether every resolution
    is complete for the image, the regexes whose names changed)."""
    changed: set[str] = set()
    order: Iterable[str] = regexes if first is None else [first, *(p for p in regexes if p != first)]
    for pattern in order:
        r = regexes[pattern]
        if r.todo is None and r.version >= image.version:
            continue
        before = r.names
        if pattern == first:
            _step(pattern, r, image, may_describe, 1 << 62)  # the member's own regex: its request pays
        elif budget <= 0:
            return False, changed
        else:
            budget = _step(pattern, r, image, may_describe, budget)
        if r.names is not before and r.names != before:
            changed.add(pattern)
        if r.todo is not None:
            return False, changed
    return True, changed


# -- names ---------------------------------------------------------------------------------------------


def _has(sorted_names: tuple[str, ...], name: str) -> bool:
    i = bisect.bisect_left(sorted_names, name)
    return i < len(sorted_names) and sorted_names[i] == name


def member_names(sorted_names: tuple[str, ...], known: frozenset[str], known_version: int,
                 image: TopicImage) -> frozenset[str]:
    """The topics of ``image`` a member subscribes to by name (``sorted_names``, sorted), from
    what it had at ``known_version`` (-1: nothing yet): the whole list once, then only the names
    born since."""
    if known_version < 0:
        topics = image.topics
        if len(sorted_names) > len(topics):
            return frozenset(n for n in topics if _has(sorted_names, n))
        return frozenset(n for n in sorted_names if n in topics)
    if known_version >= image.version:
        return known
    keep = {n for n in known if (b := image.born(n)) is not None and b <= known_version}
    keep.update(n for n in image.born_after(known_version) if _has(sorted_names, n))
    return frozenset(keep)


# -- a group's subscriptions (the state machine's bookkeeping, consumer_group.py) ---------------------


class ConsumerMember(Protocol):
    """What the bookkeeping reads and keeps of a member (consumer_group.ConsumerMember)."""

    member_id: str
    subscribed_names: tuple[str, ...]
    subscribed_regex: str | None
    #: volatile: the topics of image version ``topics_version`` it names
    topics: frozenset[str]
    topics_version: int


class ConsumerGroup(Protocol):
    """What the bookkeeping reads and keeps of a group (consumer_group.ConsumerGroup): its
    members, and the state derived from them (see the fields' comments there)."""

    members: Mapping[str, Any]  # member id -> ConsumerMember
    subscribed_topics: dict[str, tuple[uuid.UUID, int]]
    regexes: dict[str, RegexResolution]
    derived: bool
    topics_version: int
    stale: bool
    joined: list[str]
    next_full_refresh: int
    resolved_for: int
    index: dict[str, list[str]] | None



def derive(group: ConsumerGroup) -> None:
    """Rebuild what is derived from the members (after a load or a replayed change)."""
    if group.derived:
        return
    old = group.regexes
    group.regexes = {}
    for m in group.members.values():
        m.topics_version = -1
        if m.subscribed_regex is not None:
            r = group.regexes.get(m.subscribed_regex)
            if r is None:
                r = group.regexes[m.subscribed_regex] = old.get(m.subscribed_regex) or RegexResolution()
                r.users = 0
            r.users += 1
    group.derived, group.stale, group.resolved_for, group.index = True, True, -1, None


def set_regex(group: ConsumerGroup, member: ConsumerMember, regex: str | None) -> None:
    """``member`` subscribes by ``regex`` now (None: by none): the group's regex users follow."""
    old = member.subscribed_regex
    if old is not None:
        r = group.regexes.get(old)
        if r is not None:
            r.users -= 1
            if r.users <= 0:
                del group.regexes[old]
    member.subscribed_regex = regex
    if regex is not None:
        r = group.regexes.setdefault(regex, RegexResolution())
        r.users += 1
        if r.version < 0:
            group.resolved_for = -1
    group.stale = True


def member_topics(member: ConsumerMember, image: TopicImage) -> frozenset[str]:
    """The topics of ``image`` ``member`` names (``member_names``, kept on the member)."""
    if member.topics_version != image.version:
        member.topics = member_names(member.subscribed_names, member.topics, member.topics_version, image)
        member.topics_version = image.version
    return member.topics


def refresh_topics(group: ConsumerGroup, member: ConsumerMember, image: TopicImage, now: int,
                   may_describe: Callable[[str], bool] | None) -> bool:
    """Bring the group's regex resolutions and subscribed topics up to ``image`` (the
    heartbeating member's regex first and completely, the others within the refresh
    budget); whether the subscribed topics changed (the caller then bumps the group epoch).
    A heartbeat that changes nothing, with the topics unchanged, does no work here."""
    if now >= group.next_full_refresh:
        if group.next_full_refresh:
            for r in group.regexes.values():
                r.restart()
            group.resolved_for = -1
        group.next_full_refresh = now + FULL_REFRESH_MS
    if group.regexes and group.resolved_for != image.version:
        done, resolved = refresh(group.regexes, image, may_describe, member.subscribed_regex)
        group.resolved_for = image.version if done else -1
        mine = member.subscribed_regex
        if resolved and not (resolved == {mine} and group.regexes[mine].users == 1 and member.member_id in group.joined):
            group.stale = True  # (a regex only the member that just joined uses adds to the group's topics)
    names: set[str]
    if group.stale or group.topics_version != image.version:
        group.index = None
        names = set()
        for m in group.members.values():
            names |= member_topics(m, image)
        for r in group.regexes.values():
            names.update(n for n in r.names if n in image.topics)
    elif group.joined:  # members joined, nothing else changed: O(their subscriptions)
        names = set(group.subscribed_topics)
        for mid in group.joined:
            m = group.members.get(mid)
            if m is not None:
                mine = set(member_topics(m, image))
                if m.subscribed_regex is not None:
                    mine.update(n for n in group.regexes[m.subscribed_regex].names if n in image.topics)
                names |= mine
                if group.index is not None:  # the member joins each of its topics' subscribers
                    for n in mine:
                        bisect.insort(group.index.setdefault(n, []), mid)
    else:
        return False
    group.joined.clear()
    seen = {n: image.topics[n] for n in sorted(names)}
    group.stale, group.topics_version = False, image.version
    if seen == group.subscribed_topics:
        return False
    group.subscribed_topics = seen
    return True


def subscriptions_of(group: ConsumerGroup, image: TopicImage) -> dict[str, frozenset[str]]:
    """member id -> the topics of ``image`` it subscribes to (names and regex)."""
    by_regex = {p: frozenset(n for n in r.names if n in image.topics) for p, r in group.regexes.items()}
    out = {}
    for mid, m in group.members.items():
        mine = member_topics(m, image)
        if m.subscribed_regex is not None:
            mine = mine | by_regex.get(m.subscribed_regex, frozenset())
        out[mid] = mine
    return out
