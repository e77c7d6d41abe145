"""What each API needs (issue 18): the one table of the broker's authorization rules, as Kafka's
``KafkaApis`` applies them. Pure data.

``RULES[api key]`` maps a *role* (the name a handler uses: ``"topic"``, ``"group"``, …) to a
``Need``: the resource type and operation to check, the error code a refusal answers, and its
scope: ``REQUEST`` (the whole request fails), ``ITEM`` (each topic / partition / group / id
answers the error on its own, the others go on), ``FILTER`` (what may not be seen is left out of
the answer, no error). ``when`` says when the need applies. Handlers check through
``broker/handlers/_acl.Gate`` with their API key and the role, so the operation and the error of
every check are read from here and nowhere else; ``tests/unit/test_acl_rules.py`` holds this
table to cover every routed API.

The resource name of a CLUSTER need is always ``kafka-cluster``; of the others, the topic, group
or transactional id of the request.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from oncelog.acl.model import AclOperation as Op
from oncelog.acl.model import ResourceType as R
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

__all__ = ["Need", "RULES", "Scope"]


class Scope(enum.Enum):
    REQUEST = "the whole request"
    ITEM = "each item"
    FILTER = "left out"


@dataclass(frozen=True, slots=True)
class Need:
    resource: R
    operation: Op
    error: ErrorCode | None  # None: nothing is answered (FILTER), or the answer is a value (0 operations)
    scope: Scope
    when: str = ""


_TOPIC = ErrorCode.topic_authorization_failed
_GROUP = ErrorCode.group_authorization_failed
_CLUSTER = ErrorCode.cluster_authorization_failed
_TXN = ErrorCode.transactional_id_authorization_failed
REQ, ITEM, FILTER = Scope.REQUEST, Scope.ITEM, Scope.FILTER

_FOLLOWER = Need(R.CLUSTER, Op.CLUSTER_ACTION, _CLUSTER, REQ, "a follower's request (replica id >= 0)")
_CLUSTER_OPS = Need(R.CLUSTER, Op.DESCRIBE, None, FILTER,
                    "cluster authorized operations, when asked: 0 without DESCRIBE on the cluster")
_MEMBER = {"group": Need(R.GROUP, Op.READ, _GROUP, REQ)}

RULES: dict[int, dict[str, Need]] = {
    apis.PRODUCE: {
        "transactional_id": Need(R.TRANSACTIONAL_ID, Op.WRITE, _TXN, REQ, "a request with a transactional id"),
        "topic": Need(R.TOPIC, Op.WRITE, _TOPIC, ITEM),
    },
    apis.FETCH: {"topic": Need(R.TOPIC, Op.READ, _TOPIC, ITEM), "follower": _FOLLOWER},
    apis.LIST_OFFSETS: {"topic": Need(R.TOPIC, Op.DESCRIBE, _TOPIC, ITEM)},
    apis.METADATA: {
        "topic": Need(R.TOPIC, Op.DESCRIBE, _TOPIC, ITEM, "named topics; a request for all topics leaves them out"),
        "create_cluster": Need(R.CLUSTER, Op.CREATE, None, FILTER, "auto-creation: CREATE on the cluster, or"),
        "create_topic": Need(R.TOPIC, Op.CREATE, _TOPIC, ITEM, "auto-creation: CREATE on the topic"),
        "cluster_ops": _CLUSTER_OPS,
    },
    apis.OFFSET_COMMIT: {"group": Need(R.GROUP, Op.READ, _GROUP, REQ, "every partition answers it"),
                         "topic": Need(R.TOPIC, Op.READ, _TOPIC, ITEM)},
    apis.OFFSET_FETCH: {"group": Need(R.GROUP, Op.DESCRIBE, _GROUP, ITEM, "per group (v8+ several groups)"),
                        "topic": Need(R.TOPIC, Op.DESCRIBE, _TOPIC, ITEM,
                                      "named partitions; all partitions of the group: left out")},
    apis.FIND_COORDINATOR: {"group": Need(R.GROUP, Op.DESCRIBE, _GROUP, ITEM, "key type GROUP"),
                            "transactional_id": Need(R.TRANSACTIONAL_ID, Op.DESCRIBE, _TXN, ITEM,
                                                     "key type TRANSACTION")},
    apis.JOIN_GROUP: _MEMBER,
    apis.HEARTBEAT: _MEMBER,
    apis.CONSUMER_GROUP_HEARTBEAT: {  # issue 30 (KIP-848)
        **_MEMBER,
        "topic": Need(R.TOPIC, Op.DESCRIBE, _TOPIC, REQ,
                      "every subscribed topic name; the topics a regex matches: those refused are left out"),
    },
    apis.LEAVE_GROUP: _MEMBER,
    apis.SYNC_GROUP: _MEMBER,
    apis.DESCRIBE_GROUPS: {"group": Need(R.GROUP, Op.DESCRIBE, _GROUP, ITEM)},
    apis.CONSUMER_GROUP_DESCRIBE: {  # issue 30
        "group": Need(R.GROUP, Op.DESCRIBE, _GROUP, ITEM),
        "topic": Need(R.TOPIC, Op.DESCRIBE, _TOPIC, ITEM,
                      "every topic of the group's assignments: else the group, without its members"),
    },
    apis.SHARE_GROUP_HEARTBEAT: {**_MEMBER,  # issue 30 (KIP-932): READ on the group
                                 "topic": Need(R.TOPIC, Op.DESCRIBE, _TOPIC, REQ, "every subscribed topic name")},
    apis.SHARE_GROUP_DESCRIBE: {"group": Need(R.GROUP, Op.DESCRIBE, _GROUP, ITEM),
                                "topic": Need(R.TOPIC, Op.DESCRIBE, _TOPIC, ITEM,
                                              "every topic assigned to a member: else the group answers it, "
                                              "without members")},
    apis.SHARE_FETCH: {"group": Need(R.GROUP, Op.READ, _GROUP, REQ), "topic": Need(R.TOPIC, Op.READ, _TOPIC, ITEM)},
    apis.SHARE_ACKNOWLEDGE: {"group": Need(R.GROUP, Op.READ, _GROUP, REQ),
                             "topic": Need(R.TOPIC, Op.READ, _TOPIC, ITEM)},
    apis.DESCRIBE_SHARE_GROUP_OFFSETS: {"group": Need(R.GROUP, Op.DESCRIBE, _GROUP, ITEM),
                                        "topic": Need(R.TOPIC, Op.DESCRIBE, None, FILTER)},
    apis.ALTER_SHARE_GROUP_OFFSETS: {"group": Need(R.GROUP, Op.READ, _GROUP, REQ),
                                     "topic": Need(R.TOPIC, Op.READ, _TOPIC, ITEM)},
    apis.DELETE_SHARE_GROUP_OFFSETS: {"group": Need(R.GROUP, Op.DELETE, _GROUP, REQ),
                                      "topic": Need(R.TOPIC, Op.READ, _TOPIC, ITEM)},
    apis.LIST_GROUPS: {"cluster": Need(R.CLUSTER, Op.DESCRIBE, None, FILTER, "every group, or"),
                       "group": Need(R.GROUP, Op.DESCRIBE, None, FILTER, "the groups it may describe")},
    apis.API_VERSIONS: {},
    apis.SASL_HANDSHAKE: {},  # before authentication: nothing to authorize (Kafka's)
    apis.SASL_AUTHENTICATE: {},
    apis.DESCRIBE_USER_SCRAM_CREDENTIALS: {"cluster": Need(R.CLUSTER, Op.DESCRIBE, _CLUSTER, REQ)},
    apis.ALTER_USER_SCRAM_CREDENTIALS: {"cluster": Need(R.CLUSTER, Op.ALTER, _CLUSTER, REQ)},
    apis.CREATE_TOPICS: {"cluster": Need(R.CLUSTER, Op.CREATE, None, FILTER, "CREATE on the cluster, or"),
                         "topic": Need(R.TOPIC, Op.CREATE, _TOPIC, ITEM, "CREATE on the topic"),
                         "configs": Need(R.TOPIC, Op.DESCRIBE_CONFIGS, _TOPIC, ITEM,
                                         "the configs in the answer (v5+): topic_config_error_code")},
    apis.DELETE_TOPICS: {"topic": Need(R.TOPIC, Op.DELETE, _TOPIC, ITEM)},
    apis.DELETE_RECORDS: {"topic": Need(R.TOPIC, Op.DELETE, _TOPIC, ITEM)},
    apis.INIT_PRODUCER_ID: {
        "transactional_id": Need(R.TRANSACTIONAL_ID, Op.WRITE, _TXN, REQ, "a transactional producer"),
        "idempotent": Need(R.CLUSTER, Op.IDEMPOTENT_WRITE, _CLUSTER, REQ,
                           "an idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic"),
        "any_topic": Need(R.TOPIC, Op.WRITE, _CLUSTER, REQ, "an idempotent producer: WRITE on some topic"),
        "two_phase_commit": Need(R.TRANSACTIONAL_ID, Op.TWO_PHASE_COMMIT, _TXN, REQ,
                                 "KIP-939 enable_2pc (v6+, not served yet): also TWO_PHASE_COMMIT"),
    },
    apis.OFFSET_FOR_LEADER_EPOCH: {
        "follower": Need(R.CLUSTER, Op.CLUSTER_ACTION, None, FILTER, "CLUSTER_ACTION on the cluster covers every topic;"),
        "topic": Need(R.TOPIC, Op.DESCRIBE, _TOPIC, ITEM, "otherwise DESCRIBE on each topic"),
    },
    apis.ADD_PARTITIONS_TO_TXN: {
        "transactional_id": Need(R.TRANSACTIONAL_ID, Op.WRITE, _TXN, ITEM, "every partition of the transaction"),
        "topic": Need(R.TOPIC, Op.WRITE, _TOPIC, ITEM, "the others answer OPERATION_NOT_ATTEMPTED"),
        "broker": Need(R.CLUSTER, Op.CLUSTER_ACTION, _CLUSTER, REQ, "v4+ (sent by brokers)"),
    },
    apis.ADD_OFFSETS_TO_TXN: {"transactional_id": Need(R.TRANSACTIONAL_ID, Op.WRITE, _TXN, REQ),
                              "group": Need(R.GROUP, Op.READ, _GROUP, REQ)},
    apis.END_TXN: {"transactional_id": Need(R.TRANSACTIONAL_ID, Op.WRITE, _TXN, REQ)},
    apis.WRITE_TXN_MARKERS: {"cluster": Need(R.CLUSTER, Op.CLUSTER_ACTION, _CLUSTER, REQ, "every partition answers it")},
    apis.TXN_OFFSET_COMMIT: {"transactional_id": Need(R.TRANSACTIONAL_ID, Op.WRITE, _TXN, REQ),
                             "group": Need(R.GROUP, Op.READ, _GROUP, REQ),
                             "topic": Need(R.TOPIC, Op.READ, _TOPIC, ITEM)},
    apis.DESCRIBE_CONFIGS: {"topic": Need(R.TOPIC, Op.DESCRIBE_CONFIGS, _TOPIC, ITEM),
                            "cluster": Need(R.CLUSTER, Op.DESCRIBE_CONFIGS, _CLUSTER, ITEM, "BROKER resources"),
                            "group": Need(R.GROUP, Op.DESCRIBE_CONFIGS, _GROUP, ITEM)},
    apis.ALTER_CONFIGS: {"topic": Need(R.TOPIC, Op.ALTER_CONFIGS, _TOPIC, ITEM),
                         "cluster": Need(R.CLUSTER, Op.ALTER_CONFIGS, _CLUSTER, ITEM, "BROKER resources"),
                         "group": Need(R.GROUP, Op.ALTER_CONFIGS, _GROUP, ITEM)},
    apis.INCREMENTAL_ALTER_CONFIGS: {"topic": Need(R.TOPIC, Op.ALTER_CONFIGS, _TOPIC, ITEM),
                                     "cluster": Need(R.CLUSTER, Op.ALTER_CONFIGS, _CLUSTER, ITEM, "BROKER resources"),
                                     "group": Need(R.GROUP, Op.ALTER_CONFIGS, _GROUP, ITEM)},
    apis.CREATE_PARTITIONS: {"topic": Need(R.TOPIC, Op.ALTER, _TOPIC, ITEM)},
    apis.DELETE_GROUPS: {"group": Need(R.GROUP, Op.DELETE, _GROUP, ITEM)},
    apis.OFFSET_DELETE: {"group": Need(R.GROUP, Op.DELETE, _GROUP, REQ),
                         "topic": Need(R.TOPIC, Op.READ, _TOPIC, ITEM)},
    apis.DESCRIBE_CLUSTER: {"cluster_ops": _CLUSTER_OPS},
    apis.DESCRIBE_LOG_DIRS: {"cluster": Need(R.CLUSTER, Op.DESCRIBE, _CLUSTER, REQ)},
    apis.ALTER_REPLICA_LOG_DIRS: {"cluster": Need(R.CLUSTER, Op.ALTER, _CLUSTER, ITEM)},
    apis.LIST_CONFIG_RESOURCES: {"cluster": Need(R.CLUSTER, Op.DESCRIBE_CONFIGS, _CLUSTER, REQ)},
    apis.ELECT_LEADERS: {"cluster": Need(R.CLUSTER, Op.ALTER, _CLUSTER, REQ)},
    apis.ALTER_PARTITION_REASSIGNMENTS: {"cluster": Need(R.CLUSTER, Op.ALTER, _CLUSTER, REQ)},
    apis.LIST_PARTITION_REASSIGNMENTS: {"cluster": Need(R.CLUSTER, Op.DESCRIBE, _CLUSTER, REQ)},
    apis.DESCRIBE_QUORUM: {"cluster": Need(R.CLUSTER, Op.DESCRIBE, _CLUSTER, REQ)},
    apis.DESCRIBE_TOPIC_PARTITIONS: {"topic": Need(R.TOPIC, Op.DESCRIBE, _TOPIC, ITEM,
                                                   "named topics; otherwise left out")},
    apis.DESCRIBE_PRODUCERS: {"topic": Need(R.TOPIC, Op.READ, _TOPIC, ITEM)},
    apis.DESCRIBE_TRANSACTIONS: {"transactional_id": Need(R.TRANSACTIONAL_ID, Op.DESCRIBE, _TXN, ITEM),
                                 "topic": Need(R.TOPIC, Op.DESCRIBE, None, FILTER,
                                               "the transaction's partitions of topics it may not describe")},
    apis.LIST_TRANSACTIONS: {"transactional_id": Need(R.TRANSACTIONAL_ID, Op.DESCRIBE, None, FILTER)},
    apis.DESCRIBE_ACLS: {"cluster": Need(R.CLUSTER, Op.DESCRIBE, _CLUSTER, REQ)},
    apis.CREATE_ACLS: {"cluster": Need(R.CLUSTER, Op.ALTER, _CLUSTER, REQ)},
    apis.DELETE_ACLS: {"cluster": Need(R.CLUSTER, Op.ALTER, _CLUSTER, REQ)},
}


def table() -> str:
    """The rules as a Markdown table (docs/ACLS.md)."""
    rows = ["| API | resource | operation | refused with | scope | when |", "|---|---|---|---|---|---|"]
    for key in sorted(RULES):
        for role, n in RULES[key].items():
            err = n.error.name.upper() if n.error is not None else "—"
            rows.append(f"| {apis.api_name(key)} ({key}) | {n.resource.name} | {n.operation.name} | {err} | "
                        f"{n.scope.value} | {n.when} |")
        if not RULES[key]:
            rows.append(f"| {apis.api_name(key)} ({key}) | — | — | — | — | always allowed |")
    return "\n".join(rows) + "\n"
