"""``python -m bench.object_store [--rounds N] [--json FILE]``: which S3 client the diskless engine
uses (issue 29), measured against a real SeaweedFS on loopback (tests/seaweedfs.py).

Both candidates run from asyncio, as the broker would call them, in the same run against the
same server, alternating (obstore first in even rounds, aiobotocore first in odd ones):

- ``obstore`` (Rust object_store under a Python binding; its async calls are awaitables driven
  by its own tokio threads),
- ``aiobotocore`` (botocore's request model on aiohttp).

Per client: 1 MiB PUT latency (sequential) p50/p99; 4 KiB range GET latency p50/p99; PUT
throughput with 8 concurrent 1 MiB PUTs (MB/s); range-GET throughput with 32 concurrent 4 KiB
GETs (requests/s); client CPU per MB put (the process's CPU time over the throughput phase,
which counts the client's own threads: tokio's or aiohttp's); the import time; whether a
conditional create (If-None-Match: *) over an existing key is refused. Process CPU includes the
event loop's own overhead, the same for both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

MiB = 1 << 20


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def import_time(statement: str) -> float:
    """Seconds a fresh interpreter takes to run ``statement`` (the import cost a broker pays)."""
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return float(out.stdout.strip())


class ObstoreClient:
    name = "obstore"

    def __init__(self, srv) -> None:
        import obstore
        from obstore.store import S3Store

        self.import_s = import_time("from obstore.store import S3Store")
        self.obstore = obstore
        self.store = S3Store(srv.bucket, endpoint=srv.endpoint, access_key_id=srv.access_key,
                             secret_access_key=srv.secret_key, region=srv.region,
                             client_options={"allow_http": True})

    async def put(self, key: str, data: bytes) -> None:
        await self.obstore.put_async(self.store, key, data)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            await self.obstore.put_async(self.store, key, data, mode="create")
            return True
        except self.obstore.exceptions.AlreadyExistsError:
            return False

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return bytes(await self.obstore.get_range_async(self.store, key, start=start, end=end))

    async def close(self) -> None:
        pass


class BotoClient:
    name = "aiobotocore"

    def __init__(self, srv) -> None:
        from aiobotocore.session import get_session
        from botocore.config import Config

        self.import_s = import_time("from aiobotocore.session import get_session; from botocore.config import Config")
        self.srv = srv
        self.session = get_session()
        self.config = Config(max_pool_connections=64, retries={"max_attempts": 1})
        self.client = None

    async def open(self) -> None:
        srv = self.srv
        self._cm = self.session.create_client("s3", endpoint_url=srv.endpoint, region_name=srv.region,
                                              aws_access_key_id=srv.access_key,
                                              aws_secret_access_key=srv.secret_key, config=self.config)
        self.client = await self._cm.__aenter__()

    async def put(self, key: str, data: bytes) -> None:
        await self.client.put_object(Bucket=self.srv.bucket, Key=key, Body=data)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            await self.client.put_object(Bucket=self.srv.bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412:
                return False
            raise

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        r = await self.client.get_object(Bucket=self.srv.bucket, Key=key, Range=f"bytes={start}-{end - 1}")
        async with r["Body"] as body:
            return await body.read()

    async def close(self) -> None:
        await self._cm.__aexit__(None, None, None)


async def measure(client, round_no: int, n_seq: int, n_par: int) -> dict:
    payload = os.urandom(MiB)
    prefix = f"bench/{client.name}/{round_no}"
    # warm-up (connection pool, signing keys)
    for i in range(3):
        await client.put(f"{prefix}/warm{i}", payload)
    put_lat = []
    for i in range(n_seq):
        t = time.perf_counter()
        await client.put(f"{prefix}/seq{i}", payload)
        put_lat.append(time.perf_counter() - t)
    get_lat = []
    for i in range(n_seq * 4):
        start = (i * 4096 * 7) % (MiB - 4096)
        t = time.perf_counter()
        got = await client.get_range(f"{prefix}/seq{i % n_seq}", start, start + 4096)
        get_lat.append(time.perf_counter() - t)
        assert got == payload[start:start + 4096]
    # throughput: n_par PUTs of 1 MiB, 8 at a time
    sem = asyncio.Semaphore(8)

    async def one_put(i: int) -> None:
        async with sem:
            await client.put(f"{prefix}/par{i}", payload)

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one_put(i) for i in range(n_par)))
    put_wall, put_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    gsem = asyncio.Semaphore(32)

    async def one_get(i: int) -> None:
        async with gsem:
            s = (i * 8192) % (MiB - 4096)
            await client.get_range(f"{prefix}/par{i % n_par}", s, s + 4096)

    n_get = n_par * 20
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one_get(i) for i in range(n_get)))
    get_wall, get_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    refused = not await client.put_if_absent(f"{prefix}/seq0", b"x")
    created = await client.put_if_absent(f"{prefix}/new", b"x")
    return {
        "put_1mib_p50_ms": statistics.median(put_lat) * 1e3, "put_1mib_p99_ms": pct(put_lat, 99) * 1e3,
        "get_4k_p50_ms": statistics.median(get_lat) * 1e3, "get_4k_p99_ms": pct(get_lat, 99) * 1e3,
        "put_MBps_8way": n_par / put_wall, "put_cpu_ms_per_MB": put_cpu / n_par * 1e3,
        "get_4k_per_s_32way": n_get / get_wall, "get_cpu_ms_per_req": get_cpu / n_get * 1e3,
        "conditional_create_refused": refused and created,
    }


async def run(rounds: int, n_seq: int, n_par: int) -> dict:
    import seaweedfs

    srv = seaweedfs.SeaweedServer()
    srv.start()
    print(f"SeaweedFS started in {srv.last_start_s:.2f} s", flush=True)
    results: dict[str, list[dict]] = {"obstore": [], "aiobotocore": []}
    imports = {}
    try:
        ob, bo = ObstoreClient(srv), BotoClient(srv)
        imports = {"obstore": ob.import_s, "aiobotocore": bo.import_s}
        await bo.open()
        for r in range(rounds):
            order = [ob, bo] if r % 2 == 0 else [bo, ob]
            for c in order:
                res = await measure(c, r, n_seq, n_par)
                results[c.name].append(res)
                print(c.name, r, {k: round(v, 2) if isinstance(v, float) else v for k, v in res.items()}, flush=True)
        await bo.close()
    finally:
        srv.close()
    summary = {}
    for name, rs in results.items():
        summary[name] = {k: (statistics.median(r[k] for r in rs) if not isinstance(rs[0][k], bool)
                             else all(r[k] for r in rs)) for k in rs[0]}
        summary[name]["import_s"] = imports[name]
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seq", type=int, default=40, help="sequential 1 MiB PUTs per round")
    ap.add_argument("--par", type=int, default=64, help="concurrent 1 MiB PUTs per round")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    summary = asyncio.run(run(args.rounds, args.seq, args.par))
    print(f"\nmedian over {args.rounds} rounds (cpu: {os.cpu_count()} cores)")
    keys = list(next(iter(summary.values())))
    print("| measure | " + " | ".join(summary) + " |")
    print("|---|" + "---|" * len(summary))
    for k in keys:
        cells = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in (summary[n][k] for n in summary)]
        print(f"| {k} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
