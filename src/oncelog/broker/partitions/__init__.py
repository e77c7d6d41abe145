"""Partitions and their replica management: ``Partition`` (one partition's log engine plus the
exactly-once state above it: producer state, open transactions, LSO, aborted index; every
append goes through it), ``ReplicaManager`` (the topics and partitions this broker serves,
their configs, retention and compaction), the transaction-marker writer (``markers.py``),
KIP-890's produce verification (``txn_verifier.py``) and, in cluster mode, the leader tracker
that opens the partitions the store says this broker leads (``leader_tracker.py``).

May import: oncelog's pure layers (protocol, storage, coordinator, cluster stores), the diskless
topics' rules and parts (``oncelog.diskless``: the leader tracker picks and opens their engine)
and broker/configuration, type-only imports included. Peers and the group coordinator are
reached through Protocols of what is used, handed in (``peers.PeerRequests``,
``markers.TransactionOffsets``). Coordinators, membership, the database bridge, handlers and the
broker import it.
"""
