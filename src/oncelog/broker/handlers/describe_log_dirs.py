"""DescribeLogDirs (35): the log directories and the partitions in them (v1..v5; Kafka 4
removed v0).

One log directory: the broker's data directory, with every partition open here (embedded:
every partition; the request's topic list, or null for all, selects them), each with its size
in bytes and offset lag 0 (the partition's one replica is its leader, nothing is behind, and
nothing is a "future" replica). v4+ adds the directory's total and usable bytes (the file
system's). In cluster mode the store keeps the data: the directory listed is the broker's data
directory, the partitions are the ones this broker leads now, and each size is the bytes of its
batches in the store (the engine's ``size_bytes``), a partition led elsewhere is not listed.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.DESCRIBE_LOG_DIRS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    _acl.check(_acl.gate(broker, client, API_KEY), "cluster")  # ACLs (issue 18, acl/rules.py)
    req = request.body
    m = Builder(API_KEY, request.api_version)
    rm = broker.replicas
    wanted: dict[str, set[int]] | None = None
    if req.topics is not None:
        wanted = {}
        for t in req.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)
    by_topic: dict[str, list[Any]] = {}
    for tp, part in sorted(rm.partitions.items()):
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            continue
        by_topic.setdefault(tp.topic, []).append(m.DescribeLogDirsPartition(
            partition_index=tp.partition, partition_size=part.log.size_bytes, offset_lag=0, is_future_key=False))
    log_dir = os.path.abspath(broker.config.data_dir)
    try:
        usage = shutil.disk_usage(log_dir)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    result = m.DescribeLogDirsResult(
        error_code=ErrorCode.none, log_dir=log_dir,
        topics=tuple(m.DescribeLogDirsTopic(name=n, partitions=tuple(ps)) for n, ps in by_topic.items()),
        total_bytes=total, usable_bytes=usable, is_cordoned=False)
    return m.DescribeLogDirsResponse(error_code=ErrorCode.none, results=(result,))
