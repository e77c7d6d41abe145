"""The storage engines: each keeps partitions' record batches its own way behind the one contract
``storage/engine.py`` (``PartitionEngine``). ``local/``: segment files on the broker's disk (the
embedded broker); ``postgres/``: rows in the cluster's PostgreSQL store, appended by a group
commit (cluster mode); ``diskless/``: batches in an object store, their coordinates in the
cluster's store, committed one object per interval (issue 29, topics with ``diskless.enable``;
its object-store services are ``oncelog/diskless/``'s, seen through protocols). What every engine shares — the log configuration (``storage/config.py``),
the read parts (``storage/parts.py``), the keep rules of compaction (``storage/keep_rules.py``),
leader epochs, the producer state and the aborted-transaction index — lives one level up, in
storage/, and no engine imports another.
"""
