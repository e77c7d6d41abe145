"""The local engine: a partition's log in segment files on the broker's disk (``log.py``, with its
segments, indexes, damage recovery and compaction cleaner). Synchronous and asyncio-free: an
append is in the log (the page cache; fsync by the flush policy) when ``PartitionLog.append``
returns, so its ``submit`` hands back an append that is already complete.
"""
