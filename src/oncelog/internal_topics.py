"""The names of the internal topics, defined once: the topics the broker's coordinators write and
clients may not (Produce refuses them, R22), placed and led like any other partition.

* ``__consumer_offsets``: the group coordinator's offsets and group metadata (R13);
* ``__transaction_state``: the transaction coordinator's log (R14, R19);
* ``__share_group_state``: share groups' state on the embedded broker (KIP-932; cluster mode
  keeps it in the store).

No imports: every layer may name them (the pure coordinators' loaders, storage rules, the
broker's parts, the diskless topic rules).
"""

from __future__ import annotations

__all__ = ["INTERNAL_TOPICS", "OFFSETS_TOPIC", "SHARE_STATE_TOPIC", "TXN_TOPIC"]

OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
#: the internal topics: clients may neither create nor produce to them, and a topic of one of these
#: names that the broker did not create as internal is never adopted (the coordinators load their
#: partitions as they are led; cluster mode keeps share state in the store, not in a topic)
INTERNAL_TOPICS = (OFFSETS_TOPIC, TXN_TOPIC, SHARE_STATE_TOPIC)
