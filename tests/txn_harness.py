"""A broker's storage and its transaction coordinator, without sockets, for unit tests.

``TxnNode`` opens real partitions in a temporary data directory and runs the real
``TransactionCoordinator`` (broker layer) on them, its coroutines driven to completion on a
private event loop so the tests read as plain calls. Faults: ``fail_markers`` (partitions whose
marker write fails) and ``fail_txn_log`` (appends to ``__transaction_state`` fail: a full disk).
``restart()`` closes everything and loads again from the files, as a restarted broker does
(``restart(crash=True)``: as a broker killed and started again).
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.partitions.markers import LocalMarkerWriter
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.broker.coordinators.transaction_coordinator import TXN_TOPIC, TransactionCoordinator
from oncelog.broker.coordinators.txn_remote import LocalOnly
from oncelog.clock import ManualClock
from oncelog.coordinator.producer_ids import ProducerIdManager
from oncelog.coordinator.transaction import log as txnlog
from oncelog.coordinator.transaction.shard import MarkerJob, TxnSettings
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol import records
from oncelog.protocol.errors import KafkaStorageError
from oncelog.types import TopicPartition
from appends import completed


class _FlakyMarkers(LocalMarkerWriter):
    def __init__(self, node: "TxnNode") -> None:
        super().__init__(node.rm)
        self.node = node

    async def write(self, job: MarkerJob, tp: TopicPartition, now_ms: int) -> None:
        if tp in self.node.fail_markers:
            raise KafkaStorageError(f"injected failure on {tp}")
        self.replicas = self.node.rm
        await super().write(job, tp, now_ms)


class Sync:
    """Calls ``target``'s methods; coroutine methods are run to completion on ``loop``."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if inspect.iscoroutinefunction(attr):
            return lambda *a, **kw: self._loop.run_until_complete(attr(*a, **kw))
        return attr


class TxnNode:
    def __init__(self, root: Path, clock: ManualClock | None = None, *, partitions: int = 3,
                 max_timeout_ms: int = 60_000, id_expiration_ms: int = 3_600_000,
                 topics: dict[str, int] | None = None) -> None:
        self.root = root
        self.clock = clock or ManualClock()
        self.loop = asyncio.new_event_loop()
        self.fail_markers: set[TopicPartition] = set()
        self.fail_txn_log = False
        self.settings = TxnSettings(num_partitions=partitions, max_timeout_ms=max_timeout_ms,
                                    id_expiration_ms=id_expiration_ms, offsets_partitions=partitions)
        self.config = BrokerConfig(
            data_dir=root, transaction_state_log_num_partitions=partitions, offsets_topic_num_partitions=partitions,
            transaction_max_timeout_ms=max_timeout_ms, transactional_id_expiration_ms=id_expiration_ms,
        )
        self.seq: dict[tuple[int, int, TopicPartition], int] = {}
        self._start(topics if topics is not None else {"orders": 2, "inventory": 1})

    def _start(self, create: dict[str, int]) -> int:
        self.rm = ReplicaManager(self.config, self.clock)
        self.rm.open()
        for name, n in create.items():
            self.rm.create_topic(name, n)
        coord = TransactionCoordinator(self.rm, self.clock, self.settings,
                                       producer_ids=ProducerIdManager(self.root / "pids.json"),
                                       markers=_FlakyMarkers(self), remote=LocalOnly())
        runtime_append = coord.runtime.append

        async def append(partition: int, batch: bytes, now: int) -> int:
            if self.fail_txn_log:
                raise KafkaStorageError(f"injected: {TXN_TOPIC}-{partition} is on a full disk")
            return await runtime_append(partition, batch, now)

        coord.runtime.append = append  # type: ignore[method-assign]
        self.real = coord
        self.coord = Sync(coord, self.loop)
        return self.loop.run_until_complete(coord.load())

    def restart(self, *, crash: bool = False) -> int:
        """Close the storage and load everything again, as a broker stopped (the coordinator's
        ``flush`` first, as ``Broker.stop``) or, with ``crash``, killed (what the coordinator had
        not appended is lost) and started again; returns the transactional ids loaded."""
        if not crash:
            self.coord.flush()
        self.rm.close()
        return self._start({})

    def close(self) -> None:
        self.rm.close()
        self.loop.close()

    def write_record(self, tid: str, target: TxnState, **changes: object) -> None:
        """Append the record of a move of ``tid`` to ``target`` and nothing else (no markers, no
        follow-up): the log as a coordinator that died right after the append leaves it."""
        shard = self.real.shard_of(tid)
        now = self.clock.now_ms()
        rec = shard.txns[tid].prepare(target, now, **changes)
        batch = records.build_batch([(txnlog.encode_key(tid), txnlog.encode_value(rec), ())], timestamp_ms=now)
        self.loop.run_until_complete(self.real.runtime.append(shard.partition, batch, now))
        shard.replay(tid, rec)

    def produce(self, pid: int, epoch: int, tp: TopicPartition, value: bytes, tid: str = "tx", *,
                v2: bool = False) -> int:
        """A transactional batch as the Produce handler takes it: verified (``v2``: added to the
        transaction by the leader, as for a Produce v12+), validated, appended."""
        if v2:
            self.coord.add_implicitly(tid, pid, epoch, tp)
        else:
            self.coord.verify_produce(tid, pid, epoch, tp)
        seq = self.seq.get((pid, epoch, tp), 0)
        batch = records.build_batch([(None, value, [])], timestamp_ms=self.clock.now_ms(), producer_id=pid,
                                    producer_epoch=epoch, base_sequence=seq, transactional=True)
        part = self.rm.partition(*tp)
        header = records.validate_produce_batch(batch, part.config.max_message_bytes)
        res = completed(part.append_validated(batch, header, self.clock.now_ms()))
        self.seq[(pid, epoch, tp)] = seq + 1
        return res.base_offset

    def committed_values(self, tp: TopicPartition) -> list[bytes]:
        """What a read_committed consumer sees: data below the LSO minus aborted transactions."""
        part = self.rm.partition(*tp)
        res = part.read(part.log_start_offset, 1 << 30, read_committed=True)
        data = part.log.read_batches(part.log_start_offset, 1 << 30, part.last_stable_offset)
        aborted = {(a.producer_id, a.first_offset, a.last_offset) for a in part.aborted.collect(0, 1 << 62)}
        out = []
        for pos, h in records.iter_batches(data):
            if h.is_control:
                continue
            if any(pid == h.producer_id and first <= h.base_offset <= last for pid, first, last in aborted):
                continue
            out.extend(r.value for r in records.iter_records(data[pos:pos + h.size]))
        assert res.last_stable_offset == part.last_stable_offset
        return out
