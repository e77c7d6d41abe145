"""Coordinator runtimes: the asyncio shells around the pure group and transaction coordinators
of ``oncelog.coordinator`` (shards, rules tables). ``coordinator_runtime.py`` loads a shard from
its internal partition and runs its timers; ``group_coordinator.py`` and
``transaction_coordinator.py`` turn requests into shard operations and appends;
``share_coordinator.py`` serves share groups (KIP-932, embedded mode);
``two_phase_commit.py`` is the one answer to "may this producer use KIP-939".

May import: oncelog's pure layers, broker/partitions (they append to internal partitions),
broker/configuration and the root's ``periodic``. Handlers, membership and the broker import it.
"""
