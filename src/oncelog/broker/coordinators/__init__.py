"""Coordinator runtimes: the asyncio shells around the pure group, transaction and share-group
coordinators of ``oncelog.coordinator`` (shards, rules tables). ``coordinator_runtime.py`` loads
a shard from its internal partition and runs its timers; ``group_coordinator.py``,
``transaction_coordinator.py`` and ``share_coordinator.py`` turn requests into shard operations
and appends; ``two_phase_commit.py`` is the one answer to "may this producer use KIP-939".

What differs between the embedded broker and cluster mode is handed to the coordinators'
constructors by the membership, each behind a Protocol named here with its embedded
implementation: ``offset_inbox.py`` (``NoInbox``), ``txn_remote.py`` (``LocalOnly``),
``share_persister.py`` (``LogSharePersister``), ``share_members.py`` (``LocalShareMembers``);
cluster mode's are ``share_store_persister.py``, ``share_members.RemoteShareMembers``,
database/inbox.py and partitions/txn_verifier.py.

May import: oncelog's pure layers and the store (``oncelog.cluster``: the share state's rows),
broker/partitions (they append to internal partitions), broker/configuration and the root's
``periodic``. Handlers, membership, the database bridge, observability and the broker import it.
"""
