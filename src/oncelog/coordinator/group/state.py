"""Classic consumer group states, the one table of legal transitions, and the per-state answers
to the requests that do not change the state (R3).

Everything that decides whether a group may move from one state to another lives here (as
Kafka's ``GroupState.validPreviousStates``). An illegal move raises ``IllegalGroupTransition``:
that is a coordinator bug (the request should have been answered with an error before), so the
dispatcher logs it and answers UNKNOWN_SERVER_ERROR.

::

    Empty ──────────────▶ PreparingRebalance ──────────────▶ CompletingRebalance ──────────▶ Stable
      ▲   a JoinGroup       │  ▲  ▲   every member rejoined,     │   the leader's SyncGroup      │
      │   (then waits the   │  │  │   or the rebalance timeout   │   assignment is stored        │
      │   initial delay)    │  │  └──── JoinGroup / LeaveGroup / expiry ─────┘                   │
      │                     │  └──────────── JoinGroup (leader, new metadata) / LeaveGroup / ────┘
      └── no member left ───┘                expiry (session or sync timeout)

    any state ──DeleteGroups, or offsets expired from an Empty group──▶ Dead (the group is removed)

A group with no members that only stores offsets (a "simple" consumer's) stays Empty.
"""

from __future__ import annotations

import enum

from oncelog.protocol.errors import (
    CoordinatorNotAvailable,
    KafkaError,
    RebalanceInProgress,
    UnknownMemberId,
)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


E, P, C, S, D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

#: target state -> the states it may be entered from
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    E: frozenset({P}),
    P: frozenset({S, C, E}),
    C: frozenset({P}),
    S: frozenset({C}),
    D: frozenset({S, P, C, E, D}),
}


class IllegalGroupTransition(RuntimeError):
    """A transition the table forbids: a bug in the coordinator, never a client's fault."""


def is_valid_transition(current: GroupState, target: GroupState) -> bool:
    return current in VALID_PREVIOUS[target]


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    if not is_valid_transition(current, target):
        raise IllegalGroupTransition(f"group {group_id!r}: {current.value} -> {target.value} is not a legal transition")


def can_rebalance(state: GroupState) -> bool:
    """Whether a join, leave or expiry may start a rebalance from ``state``."""
    return is_valid_transition(state, P)


# -- answers that depend only on the state (after member id and generation were checked) --------

#: Heartbeat from a known member of the current generation: None means "accepted".
HEARTBEAT: dict[GroupState, type[KafkaError] | None] = {
    E: UnknownMemberId,
    P: RebalanceInProgress,  # accepted (the session timer restarts), but the member must rejoin
    C: None,
    S: None,
    D: CoordinatorNotAvailable,
}

#: OffsetCommit from a known member of the current generation: None means "store it".
#: During PreparingRebalance commits are still accepted (Kafka: the heartbeat tells the member
#: to rejoin; its last commit before rejoining must not be lost).
OFFSET_COMMIT: dict[GroupState, type[KafkaError] | None] = {
    E: UnknownMemberId,
    P: None,
    C: RebalanceInProgress,
    S: None,
    D: CoordinatorNotAvailable,
}

#: SyncGroup from a known member of the current generation: None means "handled by the group"
#: (CompletingRebalance: wait for the leader's assignment; Stable: answer the stored one).
SYNC_GROUP: dict[GroupState, type[KafkaError] | None] = {
    E: UnknownMemberId,
    P: RebalanceInProgress,
    C: None,
    S: None,
    D: CoordinatorNotAvailable,
}
