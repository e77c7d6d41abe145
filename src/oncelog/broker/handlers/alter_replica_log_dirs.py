"""AlterReplicaLogDirs (34): move partitions' replicas between a broker's log directories
(v1..v2; Kafka 4 removed v0).

A broker here has one log directory, the one DescribeLogDirs lists: its data directory (in
cluster mode the data are in the store, and the directory named is still the data directory).
So every move asked is a move to where the replica already is, and is answered per partition
as Kafka answers it:

* a path that is not the log directory: LOG_DIR_NOT_FOUND (Kafka: "not found in the config");
* a partition with no replica here (embedded: unknown; cluster mode: not led by this broker):
  REPLICA_NOT_AVAILABLE (Kafka keeps that code for this API rather than NOT_LEADER_OR_FOLLOWER);
* otherwise NONE: the replica is in that directory already, nothing moves (as Kafka, which
  starts no future replica for a move to the current directory).

ACLs: ALTER on the cluster, refused per partition with CLUSTER_AUTHORIZATION_FAILED as Kafka.
"""

from __future__ import annotations

import os
from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder
from oncelog.types import TopicPartition

API_KEY = apis.ALTER_REPLICA_LOG_DIRS


def same_dir(path: str, log_dir: str) -> bool:
    """Whether ``path`` names ``log_dir`` (absolute, normalised; a trailing slash is the same)."""
    return os.path.realpath(os.path.abspath(path)) == os.path.realpath(log_dir)


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    m = Builder(API_KEY, request.api_version)
    denied = _acl.denied(_acl.gate(broker, client, API_KEY), "cluster")
    log_dir = os.path.abspath(broker.config.data_dir)
    here = broker.replicas.partitions
    by_topic: dict[str, dict[int, ErrorCode]] = {}
    for d in request.body.dirs:
        known = same_dir(d.path, log_dir)
        for t in d.topics:
            out = by_topic.setdefault(t.name, {})
            for p in t.partitions:
                if denied is not None:
                    code = denied
                elif not known:
                    code = ErrorCode.log_dir_not_found
                elif TopicPartition(t.name, p) not in here:
                    code = ErrorCode.replica_not_available
                else:
                    code = ErrorCode.none
                out[p] = code
    return m.AlterReplicaLogDirsResponse(results=tuple(
        m.AlterReplicaLogDirTopicResult(topic_name=name, partitions=tuple(
            m.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=code) for p, code in parts.items()))
        for name, parts in by_topic.items()))
