"""Cluster mode (issue 15): brokers that keep partitions, leaders and metadata in PostgreSQL.

May import ``protocol/`` and ``storage/``; never ``broker/`` nor asyncio (the asyncio shell calls
in through futures and callbacks). ``schema`` creates the tables, ``leadership`` records who
leads a partition under which epoch, ``group_commit`` writes many partitions' batches in one
database transaction, ``pg_log`` is the partition log (storage engine) on top of them.
``membership`` keeps broker sessions (leases on the database's clock), ``assignment`` decides
who should lead what (pure), ``leadership.rebalance`` applies it with bumped epochs, ``topics``
keeps the topics' metadata.
"""
