"""The PostgreSQL engine (cluster mode, issue 15): a partition's log in rows of the cluster's
store (``log.py``), appended by group commits (``group_commit.py``: many partitions' batches in
one database transaction, conditional on each partition's leader epoch; ``commit_pool.py``:
several committers per broker). It uses the cluster store's connection, errors and leadership
rows (``oncelog.cluster``); what is cluster *membership* stays there. ``pending.py`` is its one
asynchronous edge: the awaitable of a submitted append, completed at the COMMIT on the
committer's thread.
"""
