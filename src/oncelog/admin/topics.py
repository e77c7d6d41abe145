"""Creating a topic over the wire (CreateTopics), for programs that have no Kafka admin client.

``create_topic`` is what ``oncelog.testing`` uses: one request on oncelog's own protocol client
(client.py), so the test plugin needs no third-party Kafka library. Errors come back as
``KafkaError`` carrying the broker's error code and message.
"""

from __future__ import annotations

import datetime
from typing import Mapping

from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, error_for
from oncelog.protocol.messages import make


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: Mapping[str, object] | None = None, *,
                 exist_ok: bool = False, timeout: float = 30.0) -> None:
    """Create ``name`` with ``partitions`` partitions and topic ``config`` (Kafka's topic property
    names, values turned into strings). Returns once the broker answers that the topic exists.

    Raises the ``KafkaError`` for the broker's error code (TopicAlreadyExists unless
    ``exist_ok``, InvalidConfig, InvalidPartitions, ...) and ``OSError`` when the broker cannot
    be reached within ``timeout`` seconds."""
    with ProtocolClient(bootstrap, timeout=timeout, client_id="oncelog-testing") as c:
        v = c.version_for(apis.CREATE_TOPICS)
        m = c.classes(apis.CREATE_TOPICS, v)
        topic = make(m["CreatableTopic"], name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                     configs=tuple(m["CreatableTopicConfig"](name=k, value=str(val)) for k, val in (config or {}).items()))
        req = make(m["CreateTopicsRequest"], topics=(topic,), timeout=datetime.timedelta(seconds=timeout),
                   validate_only=False)
        res = c.request(apis.CREATE_TOPICS, req, version=v).topics[0]
    if res.error_code == ErrorCode.topic_already_exists and exist_ok:
        return
    if res.error_code:
        raise error_for(ErrorCode(res.error_code), f"cannot create topic {name!r}: {getattr(res, 'error_message', None) or ''}")
