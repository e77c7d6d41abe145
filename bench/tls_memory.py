"""``python -m bench.tls_memory [--connections N] [--src DIR]`` (issue 26, row 5): what an idle
or stalled TLS connection costs the broker in memory, and whether it is given back.

One broker with an SSL listener (certificates made on the spot). Measured, as the broker's RSS
(psutil): at rest; with N TLS connections through their handshake and idle; after they close;
with N connections that sent the start of a ClientHello and stalled; after those close too.
Printed per step: RSS and the difference per connection. ``--src``: run the broker from another
checkout's ``src`` (PYTHONPATH), to compare with the code before a change on the same machine.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import tempfile
import time
from pathlib import Path

import psutil

from oncelog.process import BrokerProcess, free_port
from oncelog_tools.tls_certs import make_pki


def _rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def _settle(pid: int, seconds: float = 2.0) -> int:
    time.sleep(seconds)
    return _rss(pid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds to wait after the connections close before measuring (default 3)")
    ap.add_argument("--src", default=None, help="run the broker with PYTHONPATH=SRC (another checkout's src)")
    args = ap.parse_args()
    n = args.connections
    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp) / "pki")
        plain, tls_port = free_port(), free_port()
        b = BrokerProcess(Path(tmp) / "broker", port=plain, env={"PYTHONPATH": args.src} if args.src else None, overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls_port}",
            "ssl.keystore.location": str(pki.server), "ssl.handshake.timeout.ms": "600000"})
        b.start()
        try:
            pid = b.pid
            base = _settle(pid)
            print(f"at rest: {base / 2**20:.1f} MiB")
            ctx = ssl.create_default_context(cafile=str(pki.ca))
            ctx.check_hostname = False
            socks = []
            t0 = time.monotonic()
            for _ in range(n):
                raw = socket.create_connection(("127.0.0.1", tls_port), timeout=30)
                socks.append(ctx.wrap_socket(raw, server_hostname="localhost"))
            idle = _settle(pid)
            print(f"{n} idle TLS connections ({time.monotonic() - t0:.1f} s to open): {idle / 2**20:.1f} MiB, "
                  f"{(idle - base) / n / 1024:.1f} KiB per connection")
            for s in socks:
                s.close()
            socks.clear()
            after = _settle(pid, args.settle)
            print(f"after they closed: {after / 2**20:.1f} MiB ({(after - base) / 2**20:+.1f} MiB over rest)")
            stalled = []
            for _ in range(n):
                s = socket.create_connection(("127.0.0.1", tls_port), timeout=30)
                s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # the start of a ClientHello
                stalled.append(s)
            st = _settle(pid)
            print(f"{n} stalled handshakes: {st / 2**20:.1f} MiB, {(st - after) / n / 1024:.1f} KiB per connection")
            for s in stalled:
                s.close()
            end = _settle(pid, args.settle)
            print(f"after they closed: {end / 2**20:.1f} MiB ({(end - base) / 2**20:+.1f} MiB over rest)")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
