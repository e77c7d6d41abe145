"""Cluster mode (issue 15): brokers that keep partitions, leaders and metadata in PostgreSQL.

May import ``protocol/`` and ``storage/``; never ``broker/`` nor asyncio (the asyncio shell calls
in through futures and callbacks). ``schema`` creates the tables, ``leadership`` records who
leads a partition under which epoch, ``group_commit`` writes many partitions' batches in one
database transaction, ``pg_log`` is the partition log (storage engine) on top of them.
``membership`` keeps broker sessions (leases on the database's clock), ``assignment`` decides
who should lead what (pure), ``leadership.rebalance`` applies it with bumped epochs, ``topics``
keeps the topics' metadata.
"""

#: what a command with ``--store`` says when psycopg (the ``cluster`` extra) is not installed
#: (short: one line on an 80-column terminal)
MISSING_DRIVER = "--store needs psycopg, not installed: pip install 'oncelog[cluster]'"


def missing_driver() -> str | None:
    """``MISSING_DRIVER`` when psycopg cannot be imported, else None (nothing is imported)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("psycopg") is not None
    except (ImportError, ValueError):
        found = False
    return None if found else MISSING_DRIVER
