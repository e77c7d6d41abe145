"""Which partition of an internal topic owns a key (R10).

Kafka places a group or a transactional.id on partition ``abs(key.hashCode()) % N`` of
``__consumer_offsets`` / ``__transaction_state``, with Java's ``String.hashCode`` and
``Utils.abs`` (which maps Integer.MIN_VALUE to 0, not to itself). Using exactly that function
means a tool that computes Kafka's placement agrees with ours.
"""

from __future__ import annotations

from functools import lru_cache


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=65_536)  # asked on every transactional and group request: keys repeat
def partition_for(key: str, num_partitions: int) -> int:
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % num_partitions
