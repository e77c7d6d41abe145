"""``python bench/share_hostile.py [--groups G] [--members M] [--seconds S] [--records R] [--before-src DIR]``

What many share groups with pinned windows cost everyone else (docs/RELIABILITY.md, "Share groups
under hostile clients"): one broker; G share groups, each on a topic of one partition holding R
records of 1 KB; in each group one member acquires 2,000 records (the lock limit), accepts all but
the first and holds it (the window of records in flight stays pinned), and M more members
share-fetch in a loop (raw frames on asyncio connections, tests/share_load.py: 500 ms waits,
50 MB max_bytes) for S seconds, while a bystander times an ApiVersions round trip every 10 ms.
Printed: the bystander's p50 and worst round trip against a control run before the load, the
share fetches served, the broker's CPU per share fetch, and its RSS before and after.

``--before-src DIR``: also run the same load on a broker started from the ``src`` of another
checkout (e.g. ``git archive <commit> src | tar -x -C /tmp/before``; its ``group.share.max.groups``
is not set, so keep G at 10 or less there).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"


def run(src: Path | None, groups: int, members: int, seconds: float, records: int) -> str:
    sys.path.insert(0, str(TESTS))
    import psutil
    from bystander import Bystander
    from kafka_clients import create_topic, produce
    from share_load import Member, run_members

    from oncelog.client import ProtocolClient
    from oncelog.process import BrokerProcess
    from oncelog.protocol import apis
    from oncelog.protocol.messages import make

    overrides = {"group.share.max.groups": str(groups)} if src is None and groups > 10 else {}
    b = BrokerProcess(Path(tempfile.mkdtemp(prefix="share-hostile-")) / "broker", overrides=overrides,
                      env={"PYTHONPATH": str(src)} if src is not None else None).start()
    try:
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for g in range(groups):
            create_topic("confluent", b.bootstrap, f"load{g}", 1)
            produce("confluent", b.bootstrap, f"load{g}", [(0, None, b"x" * 1000) for _ in range(records)],
                    extra={"batch.num.messages": 10})
            res = ConfigResource("GROUP", f"lg{g}", incremental_configs=[
                ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
            for fut in admin.incremental_alter_configs([res]).values():
                fut.result(30)
        with ProtocolClient(b.bootstrap) as c:
            v = c.version_for(apis.METADATA)
            m = c.classes(apis.METADATA, v)
            md = c.request(apis.METADATA, make(m["MetadataRequest"], topics=tuple(
                make(m["MetadataRequestTopic"], name=f"load{g}", topic_id=uuid.UUID(int=0)) for g in range(groups)),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False), version=v)
            tids = {t.name: t.topic_id for t in md.topics}
        proc = psutil.Process(b.pid)
        with Bystander(b.bootstrap) as control:
            time.sleep(3)
        loaders = [Member(b.host, b.port, f"lg{g}", f"load{g}", tids[f"load{g}"], max_records=2000 // members,
                          max_bytes=50 << 20) for g in range(groups) for _ in range(members)]
        marks: dict[str, float] = {}
        holder: list[Bystander] = []

        async def main() -> None:
            pinners = []
            for g in range(groups):
                pm = Member(b.host, b.port, f"lg{g}", f"load{g}", tids[f"load{g}"], max_records=2000, wait_ms=0)
                await pm.heartbeat()
                got = 0
                for _ in range(50):
                    if got >= 2000:
                        break
                    res = await pm.fetch()
                    got += sum(r.last_offset - r.first_offset + 1 for t in res.responses for p in t.partitions
                               for r in p.acquired_records)
                await pm.fetch(((1, 1999),))
                pinners.append(pm)
            marks["rss0"] = proc.memory_info().rss
            marks["cpu0"] = sum(proc.cpu_times()[:2])
            holder.append(Bystander(b.bootstrap).__enter__())

            async def keep_alive() -> None:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    await asyncio.sleep(1)
                    for pm in pinners:
                        await pm.heartbeat()

            try:
                await asyncio.gather(run_members(loaders, seconds), keep_alive())
            finally:
                for pm in pinners:
                    pm.close()

        asyncio.run(main())
        cpu = sum(proc.cpu_times()[:2]) - marks["cpu0"]
        rss1 = proc.memory_info().rss
        by = holder[0]
        by.__exit__(None, None, None)
        fetches = sum(m.session_epoch for m in loaders)
        refused = sum(1 for m in loaders if m.epoch <= 0)
        return (f"{'before' if src else 'now'}: {groups} groups x {members} members, {seconds:.0f} s: bystander p50 "
                f"{statistics.median(by.latencies) * 1000:.1f} ms (control {statistics.median(control.latencies) * 1000:.1f}),"
                f" worst {by.worst:.2f} s; {fetches} share fetches, {cpu / max(fetches, 1) * 1000:.2f} ms of broker CPU "
                f"each; RSS {marks['rss0'] / 2**20:.0f} -> {rss1 / 2**20:.0f} MB; {refused} members refused")
    finally:
        b.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--before-src", type=Path, default=None)
    args = ap.parse_args()
    if args.before_src is not None:
        print(run(args.before_src.resolve(), args.groups, args.members, args.seconds, args.records), flush=True)
    print(run(None, args.groups, args.members, args.seconds, args.records), flush=True)


if __name__ == "__main__":
    main()
