"""How fast this machine takes appends into the page cache, fresh memory versus reused (issue 7).

A broker that keeps its log on disk writes every produced byte into the page cache, and a
benchmark run keeps its data until the end, so each byte lands in memory the kernel has to find
a new page for. On a virtual machine that hands freed memory back to the host (free page
reporting, balloon) a page touched for the first time in a while costs a host-side fault; the
same write into pages freed a moment ago is several times faster. This script shows which case
a machine is in: it appends ``--gb`` GB in 1 MB writes (O_APPEND, as segments are written)
to a new file, three rounds, deleting the file and pausing ``--pause`` seconds between rounds,
and prints MB/s and CPU seconds per round; then one round immediately after a delete.

    python -m bench.page_cache [--gb 2] [--pause 5] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def append_round(directory: str, total_mb: int) -> tuple[float, float]:
    """(MB/s, CPU seconds) for appending ``total_mb`` MB to a new file, which is then deleted."""
    chunk = b"x" * 1_000_000
    fd, path = tempfile.mkstemp(dir=directory, prefix="oncelog-pagecache-")
    os.close(fd)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(total_mb):
            os.write(fd, chunk)
        return total_mb / (time.perf_counter() - t0), time.process_time() - c0
    finally:
        os.close(fd)
        os.unlink(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.page_cache", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--pause", type=float, default=5.0, help="seconds between rounds (memory may go back to the host)")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args(argv)
    mb = int(args.gb * 1000)
    for i in range(3):
        rate, cpu = append_round(args.dir, mb)
        print(f"round {i + 1} (after a {args.pause if i else 0:g} s pause): {rate:,.0f} MB/s, {cpu:.2f} CPU s")
        time.sleep(args.pause)
    append_round(args.dir, mb)
    rate, cpu = append_round(args.dir, mb)
    print(f"round right after a delete (reused pages): {rate:,.0f} MB/s, {cpu:.2f} CPU s")


if __name__ == "__main__":
    main()
