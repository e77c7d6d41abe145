"""A share group's own configs (KIP-932: IncrementalAlterConfigs on a GROUP resource): their
names, defaults and what values each accepts. Pure."""

from __future__ import annotations

import re

from oncelog.protocol.errors import InvalidConfig

__all__ = ["BY_DURATION", "GROUP_CONFIGS", "by_duration_ms", "check_group_config"]

#: group configs a share group accepts, with their defaults
GROUP_CONFIGS: dict[str, str] = {
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
    "share.record.lock.duration.ms": "",  # "": the broker's group.share.record.lock.duration.ms
    "share.delivery.count.limit": "",  # "": the broker's group.share.delivery.count.limit
    "share.renew.acknowledge.enable": "true",  # RENEW (KIP-1222) accepted
}
_CHOICES = {"share.auto.offset.reset": ("latest", "earliest"),
            "share.isolation.level": ("read_uncommitted", "read_committed"),
            "share.renew.acknowledge.enable": ("true", "false")}

BY_DURATION = "by_duration:"
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,9})?)S)?)?", re.IGNORECASE)


def check_group_config(name: str, value: str | None) -> None:
    """Raises InvalidConfig for a config a share group does not have or a value it refuses."""
    if name not in GROUP_CONFIGS:
        raise InvalidConfig(f"unknown group config {name!r} (share groups accept {', '.join(sorted(GROUP_CONFIGS))})")
    if value is None:
        return
    if name == "share.auto.offset.reset" and value.startswith(BY_DURATION):
        by_duration_ms(value)  # raises InvalidConfig
        return
    if name in _CHOICES and value.lower() not in _CHOICES[name]:
        raise InvalidConfig(f"{name}={value!r}: one of {', '.join(_CHOICES[name])}"
                            f"{' or by_duration:<ISO-8601 duration>' if name == 'share.auto.offset.reset' else ''}")
    if name not in _CHOICES:
        try:
            n = int(value)
        except ValueError:
            raise InvalidConfig(f"{name}={value!r} is not an integer") from None
        if n < (2 if name == "share.delivery.count.limit" else 1000):
            raise InvalidConfig(f"{name}={value!r} is too small")


def by_duration_ms(value: str) -> int:
    """``by_duration:PnDTnHnMn.nS`` (Java's ``Duration.parse`` form, days at most, as Kafka's
    ``share.auto.offset.reset``) in milliseconds. Raises InvalidConfig."""
    text = value[len(BY_DURATION):]
    m = _DURATION.fullmatch(text)
    if m is None or text.upper() in ("P", "PT"):
        raise InvalidConfig(f"share.auto.offset.reset={value!r}: by_duration: takes an ISO-8601 duration "
                            f"such as PT1H or P1DT30M")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
