"""The database bridge (issue 31, docs/DATABASE.md): applications' own PostgreSQL transactions
and the logs, in cluster mode. The outbox's drain (``outbox_drainer.py``: committed
``oncelog.send`` rows appended to the partitions this broker leads, the rows deleted in the
append's commit) and the group coordinator's database inbox (``inbox.py``: offsets applications
commit with ``oncelog.commit_offsets``, mirrored groups for their fencing, read through by
OffsetFetch and drained into ``__consumer_offsets``). Their SQL is in ``oncelog.cluster``
(outbox.py, inbox.py, and the schemas outbox_schema.py, inbox_schema.py).

They need psycopg (the 'cluster' extra): only ``membership/postgres.py`` imports them, for a
broker started with a store.

May import: oncelog's pure layers and ``oncelog.cluster`` (the store), broker/configuration,
broker/partitions (the drain appends through ``Partition.append_outbox``) and
broker/coordinators (the inbox is the group coordinator's ``OffsetInbox``). Only
broker/membership imports it.
"""
