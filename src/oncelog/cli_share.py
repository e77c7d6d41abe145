"""``oncelog groups describe`` for share groups (KIP-932, issue 30): members with their epochs,
subscriptions and assignments (ShareGroupDescribe), and per partition the share-partition start
offset, the log end and the lag (DescribeShareGroupOffsets)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import make

__all__ = ["show_share_group"]


def show_share_group(c: ProtocolClient, group: str, console: Console) -> bool:
    """Print ``group`` if it is a share group; False when it is none (or the broker has none)."""
    if apis.SHARE_GROUP_DESCRIBE not in c.versions:
        return False
    v = c.version_for(apis.SHARE_GROUP_DESCRIBE)
    m = c.classes(apis.SHARE_GROUP_DESCRIBE, v)
    g = c.request(apis.SHARE_GROUP_DESCRIBE, make(m["ShareGroupDescribeRequest"], group_ids=(group,),
                                                  include_authorized_operations=False), version=v).groups[0]
    if g.error_code != ErrorCode.none:
        return False
    console.print(f"group [bold]{group}[/bold]: share group (KIP-932), state {g.group_state}, group epoch "
                  f"{g.group_epoch}, assignor {g.assignor_name}, {len(g.members)} member(s)", highlight=False)
    if g.members:
        members = Table(title="members")
        for col in ("member id", "epoch", "client id", "host", "subscription", "assignment"):
            members.add_column(col)
        for mb in g.members:
            parts = ", ".join(f"{t.topic_name}:{','.join(map(str, sorted(t.partitions)))}"
                              for t in sorted(mb.assignment.topic_partitions, key=lambda t: t.topic_name)) or "-"
            members.add_row(mb.member_id, str(mb.member_epoch), mb.client_id, mb.client_host,
                            ", ".join(mb.subscribed_topic_names) or "-", parts)
        console.print(members)
    v = c.version_for(apis.DESCRIBE_SHARE_GROUP_OFFSETS)
    m = c.classes(apis.DESCRIBE_SHARE_GROUP_OFFSETS, v)
    req = make(m["DescribeShareGroupOffsetsRequest"], groups=(
        make(m["DescribeShareGroupOffsetsRequestGroup"], group_id=group, topics=None),))
    res = c.request(apis.DESCRIBE_SHARE_GROUP_OFFSETS, req, version=v).groups[0]
    offsets = Table(title="share-partition start offsets")
    for col in ("topic", "partition", "start offset", "lag"):
        offsets.add_column(col, justify="left" if col == "topic" else "right")
    for t in sorted(res.topics, key=lambda t: t.topic_name):
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            offsets.add_row(t.topic_name, str(p.partition_index), str(p.start_offset),
                            str(p.lag) if getattr(p, "lag", -1) >= 0 else "-")
    console.print(offsets)
    return True
