"""The diskless engine (issue 29, docs/DISKLESS.md): a partition's record batches in an
S3-compatible object store, their coordinates (object key, byte range, offsets, producer
fields) in the cluster's PostgreSQL store (``log.py``). The object store client, the object
writer (one object per interval for every diskless partition of a broker), the read cache and
the collector are the engine's asynchronous services in ``oncelog/diskless/``; this package sees
them only through the protocols ``ObjectCommitter`` and ``ReadCache`` in ``log.py`` and never
imports them. ``pending.py`` is its one asynchronous edge: the awaitable of a submitted append,
completed after its object's COMMIT.
"""
