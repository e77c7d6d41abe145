"""Partitions and their replica management: ``Partition`` (one partition's log engine plus the
exactly-once state above it: producer state, open transactions, LSO, aborted index; every
append goes through it), ``ReplicaManager`` (the topics and partitions this broker serves,
their configs, retention and compaction), the transaction-marker writer (``markers.py``) and
KIP-890's produce verification (``txn_verifier.py``).

May import: oncelog's pure layers (protocol, storage, coordinator, cluster stores) and
broker/configuration, type-only imports included. Peers and the group coordinator are reached
through Protocols of what is used, handed in (``peers.PeerRequests``,
``markers.TransactionOffsets``). Coordinators, membership, handlers and the broker import it.
"""
