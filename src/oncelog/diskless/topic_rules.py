"""Which topics may be diskless (issue 29, docs/DISKLESS.md §2.1): the refusals of
``diskless.enable=true``, each an INVALID_CONFIG whose message names the reason.

A topic is diskless when created with ``diskless.enable=true``; it then stays diskless, and a
PostgreSQL-engine topic stays one (no migration between engines). Refused: on the embedded
broker (no PostgreSQL to order the batches), on an internal topic (the coordinators' topics stay
on the PostgreSQL engine), with ``cleanup.policy`` containing ``compact`` (KIP-1150's first step:
compaction of objects does not exist), on a broker without ``diskless.storage.url``, and any
change of ``diskless.enable`` by AlterConfigs / IncrementalAlterConfigs.

Pure functions of the configs: the handlers call them (handlers/_cluster.py, handlers/_alter.py).
"""

from __future__ import annotations

from typing import Mapping

from oncelog.protocol.errors import InvalidConfig
from oncelog.internal_topics import INTERNAL_TOPICS

__all__ = ["ENABLE", "check_alter", "check_new_topic", "is_diskless"]

ENABLE = "diskless.enable"
INTERNAL = INTERNAL_TOPICS


def is_diskless(configs: Mapping[str, str | None] | None) -> bool:
    """Whether topic configs (raw or normalised) ask for the diskless engine."""
    raw = (configs or {}).get(ENABLE)
    return raw is not None and raw.strip().lower() == "true"


def check_new_topic(name: str, configs: Mapping[str, str | None] | None, *, cluster_mode: bool,
                    storage_url: str | None, internal: bool = False) -> None:
    """Raise InvalidConfig when topic ``name`` may not be created with ``configs``; nothing to
    check for a topic that is not diskless."""
    if not is_diskless(configs):
        return
    if not cluster_mode:
        raise InvalidConfig(f"topic {name!r}: diskless topics need cluster mode (brokers on PostgreSQL, "
                            f"--store); this broker is embedded")
    if internal or name in INTERNAL:
        raise InvalidConfig(f"topic {name!r}: an internal topic cannot be diskless")
    policy = (configs or {}).get("cleanup.policy") or ""
    if "compact" in policy:
        raise InvalidConfig(f"topic {name!r}: diskless.enable=true cannot be combined with "
                            f"cleanup.policy={policy} (compaction of diskless topics is not supported)")
    if not storage_url:
        raise InvalidConfig(f"topic {name!r}: diskless.enable=true needs an object store, and this broker has "
                            f"no diskless.storage.url")


def check_alter(name: str, old: Mapping[str, str], new: dict[str, str]) -> dict[str, str]:
    """The new configs of an existing topic, or InvalidConfig when they change its engine or
    make a diskless topic compacted. A whole-set AlterConfigs that leaves ``diskless.enable``
    out keeps the topic's value (an engine is never dropped by omission)."""
    if ENABLE not in new and ENABLE in old:
        new = {**new, ENABLE: old[ENABLE]}
    if is_diskless(old) != is_diskless(new):
        raise InvalidConfig(f"topic {name!r}: diskless.enable cannot be changed after creation "
                            f"(is {'true' if is_diskless(old) else 'false'})")
    if is_diskless(new) and "compact" in (new.get("cleanup.policy") or ""):
        raise InvalidConfig(f"topic {name!r}: a diskless topic cannot have cleanup.policy={new['cleanup.policy']} "
                            f"(compaction of diskless topics is not supported)")
    return new
