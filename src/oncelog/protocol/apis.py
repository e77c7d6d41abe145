"""The APIs this broker speaks and the versions it advertises (the ApiVersions answer).

Each entry maps an API key to the inclusive version range we implement. The ranges are chosen
so that librdkafka (confluent-kafka), kafka-python, aiokafka and kafkajs all accept them:

* Fetch reaches v18 and ListOffsets v11 (the highest kio knows): Fetch v13+ names topics by id
  (KIP-516); ListOffsets v8+ knows timestamps -4/-5/-6 (answered as Kafka does without tiered
  storage). kafka-python infers the broker's version from these ranges (ListOffsets v11: 4.2,
  DescribeLogDirs v5: 4.3), so the table is Kafka 4.2's and nothing newer (``KAFKA_RELEASE``).
* Metadata reaches v13 (v13 only adds a top-level error code, KIP-1102); v10+ returns real
  topic ids, which we keep per topic.
* Produce v3+ only: magic 2 record batches are the only format the log stores. Produce v12,
  EndTxn v5 and TxnOffsetCommit v5 are transactions version 2 (KIP-890 part 2), which
  ApiVersions also advertises as the finalized feature ``transaction.version`` = 2
  (``FEATURES``); the v11/v5/v4 steps below them only allow the TRANSACTION_ABORTABLE error
  code, which this broker does not send.
* Every version of Kafka 4.2's table for the APIs clients use (Produce 13, OffsetCommit 10,
  OffsetFetch 10, FindCoordinator 6, JoinGroup 9, LeaveGroup 5, DescribeGroups 6): kafka-python
  pinned to ``api_version=(4, 2)`` sends those versions whatever ApiVersions says (issue 30).
* ApiVersions advertises exactly what a Kafka 4.2 broker advertises for every API served here
  (``advertised``; a test holds it equal to the table kafka-python records for 4.2), including
  Kafka's two departures from the versions it serves: Produce is advertised from v0 although
  only v3+ is served (KAFKA-18659: librdkafka before 2.11.1 turned compression off unless Produce
  v0 was advertised), and InitProducerId only up to v5 although v6 (KIP-939 two-phase commit,
  unstable in Kafka 4.2) is served to a client that sends it.
* OffsetForLeaderEpoch v2..v4: Kafka 4 removed v0 and v1 (KIP-896), and kio has no schema for
  them; librdkafka and the Java consumer send v2+.

Message classes come from ``kio`` (generated from Kafka's own JSON schemas); ``message_class``
resolves them by (api key, version, request/response).
"""

from __future__ import annotations

from functools import cache
from pkgutil import resolve_name
from typing import Any

from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from oncelog.protocol.errors import UnsupportedVersion

# API keys, by name (Kafka's numbering).
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_LOG_DIRS = 35
ALTER_REPLICA_LOG_DIRS = 34
LIST_CONFIG_RESOURCES = 74
SASL_AUTHENTICATE = 36
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
ELECT_LEADERS = 43
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
OFFSET_DELETE = 47
DESCRIBE_QUORUM = 55
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
DESCRIBE_TOPIC_PARTITIONS = 75
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
SHARE_GROUP_HEARTBEAT = 76
SHARE_GROUP_DESCRIBE = 77
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92

#: api key -> (min version, max version) we serve: exactly the APIs of the broker's routing table
#: (``broker/routes.py``; a test holds the two equal). ApiVersions advertises this table.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 13),  # v12: transactions version 2 (KIP-890 part 2); v13: topics by id
    FETCH: (4, 18),
    LIST_OFFSETS: (1, 11),
    METADATA: (0, 13),
    OFFSET_COMMIT: (2, 10),  # v9: GROUP_ID_NOT_FOUND for a group that does not exist; v10: topics by id
    OFFSET_FETCH: (1, 10),  # v9: member id and epoch (KIP-848); v10: topics by id
    FIND_COORDINATOR: (0, 6),  # v6: share coordinator keys (key type 2: INVALID_REQUEST here)
    JOIN_GROUP: (0, 9),  # v8: a reason (KIP-800); v9: skip_assignment (KIP-814, never set here)
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),  # v5: a reason per member (KIP-800)
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 6),  # v6: an error message per group (KIP-1043)
    LIST_GROUPS: (0, 5),
    API_VERSIONS: (0, 4),  # v4: supported features may start at level 0 (KAFKA-17011)
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DELETE_RECORDS: (0, 2),
    INIT_PRODUCER_ID: (0, 6),  # v5: TRANSACTION_ABORTABLE allowed (never sent); v6: KIP-939 two-phase commit (not advertised)
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ADD_PARTITIONS_TO_TXN: (0, 5),
    ADD_OFFSETS_TO_TXN: (0, 4),
    END_TXN: (0, 5),  # v5: transactions version 2
    TXN_OFFSET_COMMIT: (0, 5),  # v5: transactions version 2
    DESCRIBE_CONFIGS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    DESCRIBE_CLUSTER: (0, 2),
    DESCRIBE_LOG_DIRS: (1, 4),
    ALTER_REPLICA_LOG_DIRS: (1, 2),  # one log directory: a move to it succeeds, nothing moves
    LIST_CONFIG_RESOURCES: (0, 1),  # KIP-1142; v0: client-metrics resources (none here)  # Kafka 4.2's; v5 is Kafka 4.3's (kafka-python takes it for 4.3)
    CREATE_PARTITIONS: (0, 3),
    ELECT_LEADERS: (0, 2),
    ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
    DESCRIBE_QUORUM: (0, 2),
    DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    WRITE_TXN_MARKERS: (1, 2),
    DESCRIBE_PRODUCERS: (0, 0),  # issue 17 (KIP-664)
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 2),
    SASL_HANDSHAKE: (0, 1),  # issue 18 (KIP-152); before authentication: broker/auth/gate.py
    SASL_AUTHENTICATE: (0, 2),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),  # issue 18 (KIP-554)
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    DESCRIBE_ACLS: (1, 3),  # issue 18 (Kafka 4 removed v0)
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    CONSUMER_GROUP_HEARTBEAT: (0, 1),  # issue 30 (KIP-848); v1: subscription by regex
    CONSUMER_GROUP_DESCRIBE: (0, 1),  # issue 30; v1: member type
    SHARE_GROUP_HEARTBEAT: (1, 1),  # issue 30 (KIP-932, Kafka 4.1+: v0 was the early-access version)
    SHARE_GROUP_DESCRIBE: (1, 1),
    SHARE_FETCH: (1, 2),  # v2: lock renewal (acknowledge type 4, KIP-1222), acquire mode
    SHARE_ACKNOWLEDGE: (1, 2),
    DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),  # v1: lag
    ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    DELETE_SHARE_GROUP_OFFSETS: (0, 0),
}


#: The Kafka release whose ApiVersions answer oncelog's is, for every API served here.
KAFKA_RELEASE = (4, 2)

#: Where Kafka 4.2 advertises other than it serves, and so does oncelog: Produce from v0
#: (``ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION``, KAFKA-18659; v0-v2 requests are still
#: refused by closing the connection, as Kafka's network layer does), InitProducerId up to v5
#: (v6 is ``latestVersionUnstable`` in Kafka 4.2; served here, see docs/TRANSACTIONS.md).
ADVERTISED_RANGES: dict[int, tuple[int, int]] = {
    PRODUCE: (0, 13),
    INIT_PRODUCER_ID: (0, 5),
}


def advertised(served: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """The ApiVersions answer for the ``served`` ranges (api key -> range)."""
    return {k: ADVERTISED_RANGES.get(k, v) for k, v in served.items()}


#: feature name -> (min supported, max supported, finalized level): ApiVersions v3+'s supported
#: and finalized features. ``transaction.version`` 2 tells a client (Kafka 4's Java producer)
#: that it may use transactions version 2: EndTxn v5, Produce v12 and TxnOffsetCommit v5
#: without AddPartitionsToTxn/AddOffsetsToTxn. Clients that do not read features go on with
#: transactions version 1 unchanged.
FEATURES: dict[str, tuple[int, int, int]] = {
    "transaction.version": (0, 2, 2),
}
#: the epoch of the finalized features: fixed, since they never change on a running broker
FINALIZED_FEATURES_EPOCH = 1


def api_name(api_key: int) -> str:
    return api_key_map.get(api_key, f"api-{api_key}")


@cache
def message_class(api_key: int, version: int, response: bool) -> type[Any]:
    """The kio class for one API version's request or response.

    Raises ``UnsupportedVersion`` when kio has no schema for it (an unknown key or version).
    """
    name = api_key_map.get(api_key)
    entity = EntityType.response if response else EntityType.request
    try:
        path = schema_name_map[name][version][entity]  # type: ignore[index]
    except KeyError:
        raise UnsupportedVersion(f"api key {api_key} version {version} is unknown") from None
    cls = resolve_name(path)
    assert isinstance(cls, type)
    return cls


@cache
def message_module_classes(api_key: int, version: int, response: bool) -> dict[str, type[Any]]:
    """Every dataclass defined in the kio module of one API version, by class name.

    Handlers use it to build nested response entities (``TopicProduceResponse`` …) without
    importing a fixed version: the same handler serves every advertised version.
    """
    import sys

    top = message_class(api_key, version, response)
    module = sys.modules[top.__module__]
    return {n: c for n, c in vars(module).items() if isinstance(c, type) and c.__module__ == module.__name__}


#: What clients ask for first (versions, metadata, produce, fetch, offsets, coordinators, a
#: producer id): their classes are built before the broker says it is ready (``preload``), so a
#: test's first produce does not wait for kio to build them (issue 19, start-up time).
FIRST_REQUESTS = (API_VERSIONS, METADATA, PRODUCE, FETCH, LIST_OFFSETS, FIND_COORDINATOR, INIT_PRODUCER_ID)


def preload(api_keys: tuple[int, ...] = FIRST_REQUESTS) -> None:
    """Import the request and response classes of ``api_keys`` at the newest version we
    advertise (the one current clients use)."""
    for key in api_keys:
        newest = SUPPORTED_VERSIONS[key][1]
        message_module_classes(key, newest, False)
        message_module_classes(key, newest, True)


def is_flexible(api_key: int, version: int) -> bool:
    """Whether this request version uses the flexible (tagged-field, compact) encoding."""
    return bool(message_class(api_key, version, False).__flexible__)


def request_header_version(api_key: int, version: int) -> int:
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    # ApiVersions responses always use header v0, so that a client that does not yet know
    # which versions the broker speaks can read the answer (KIP-511).
    if api_key == API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, version) else 0
