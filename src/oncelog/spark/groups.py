"""The consumer-group questions of the exactly-once writer, every one bounded (R24; issue 13).

- ``last_committed_batch``: the marker of a task partition — the committed offset of the group
  named like its transactional id — read with OffsetFetch ``require_stable`` (KIP-447: offsets
  of a transaction still being completed are waited for, never read as absent).
- ``group_metadata``: what ``send_offsets_to_transaction`` needs for a group, as a standalone
  (non-member) consumer reports it.

Both talk to the group coordinator, which is where librdkafka's coordinator requests can hang
past their timeout (guard.py). Waiting on an admin future is bounded in Python
(``wait_future``); a timeout raises ``ClientCallTimeout``. An AdminClient that failed or timed
out is retired (closed on its guard's thread) and the next question gets a new one.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

from oncelog.spark.clientstate import ClientEvents, connection_conf, probe_cluster
from oncelog.spark.guard import Guarded, deadline_after, wait_future
from oncelog.spark.options import SinkOptions

log = logging.getLogger(__name__)

#: Attempts of the marker read when it fails with a retriable error.
RETRIES = 5
#: AdminClients kept per worker process (one per connection configuration).
MAX_ADMINS = 4

_admins: "OrderedDict[tuple[tuple[str, str], ...], tuple[Guarded[Any], ClientEvents]]" = OrderedDict()
_group_metadata: dict[tuple[str, str], Any] = {}


class MarkerReadError(RuntimeError):
    """The marker of a task partition could not be read (after retries)."""


def _admin(conf: dict[str, str]) -> tuple[Guarded[Any], ClientEvents]:
    key = tuple(sorted(conf.items()))
    got = _admins.get(key)
    if got is None:
        from confluent_kafka.admin import AdminClient

        events = ClientEvents()
        got = (Guarded("marker reader", AdminClient({**conf, "error_cb": events.on_error})), events)
        _admins[key] = got
        while len(_admins) > MAX_ADMINS:
            _admins.popitem(last=False)[1][0].retire()
    else:
        _admins.move_to_end(key)
    return got


def _drop_admin(conf: dict[str, str]) -> None:
    got = _admins.pop(tuple(sorted(conf.items())), None)
    if got is not None:
        got[0].retire()


def last_committed_batch(options: SinkOptions, group: str) -> int | None:
    """The highest batch id committed under ``group`` (the marker minus one), or None.

    A retriable error or a timed-out request is retried with a new AdminClient (the old one
    may be wedged), ``RETRIES`` attempts within twice ``requestTimeoutMs``; then
    ``MarkerReadError``. Other client errors raise the client's ``KafkaException``; an answer
    that does not come within the request timeout plus the guard's grace raises
    ``ClientCallTimeout``."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException

    conf = connection_conf(options.client)
    timeout_s = options.request_timeout_ms / 1000
    until = time.monotonic() + 2 * timeout_s
    last: Exception | None = None
    for attempt in range(RETRIES):
        left = max(0.001, min(timeout_s, until - time.monotonic()))
        admin, events = _admin(conf)
        try:
            futures = admin.raw.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], require_stable=True, request_timeout=left)
            res = wait_future(
                futures[group], what="the marker read (OffsetFetch require_stable)", client=f"group {group}",
                timeout_s=deadline_after(left),
                state=lambda: f"{events.describe()}; {probe_cluster(conf)}")
            marks = [tp.offset for tp in (res.topic_partitions or []) if tp.error is None and tp.offset >= 0]
            return max(marks) - 1 if marks else None
        except KafkaException as exc:
            _drop_admin(conf)
            err = exc.args[0] if exc.args else None
            again = err is not None and (err.retriable() or err.code() == KafkaError._TIMED_OUT)
            pause = min(0.1 * 2**attempt, 2.0)
            if again and time.monotonic() + pause < until:
                log.warning("oncelog sink: the marker read of %s failed, retrying with a new client: %s", group, err)
                last = exc
                time.sleep(pause)
                continue
            if again:
                raise MarkerReadError(f"could not read the marker of group {group}: {err}") from exc
            raise
        except BaseException:
            _drop_admin(conf)
            raise
    raise MarkerReadError(f"could not read the marker of group {group} in {RETRIES} attempts: {last}") from last


def group_metadata(options: SinkOptions, group: str) -> Any:
    """The consumer group metadata that ``send_offsets_to_transaction`` needs for ``group``,
    as a standalone (non-member) consumer would report it; cached per worker process."""
    key = (options.client["bootstrap.servers"], group)
    md = _group_metadata.get(key)
    if md is None:
        from confluent_kafka import Consumer

        consumer = Guarded(f"group metadata of {group}", Consumer(
            {**connection_conf(options.client), "group.id": group, "enable.auto.commit": False}),
            close=lambda c: c.close())
        try:
            md = consumer.call("consumer_group_metadata", lambda c: c.consumer_group_metadata(),
                               deadline_after(options.request_timeout_ms / 1000))
        finally:
            consumer.retire()
        _group_metadata[key] = md
    return md


def drop_clients(options: SinkOptions) -> None:
    """Forget the AdminClient used for ``options`` (after a task failed: it may be wedged)."""
    _drop_admin(connection_conf(options.client))
