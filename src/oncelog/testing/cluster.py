"""``Cluster``: N oncelog brokers sharing one PostgreSQL store, for tests (issue 19).

``with Cluster(brokers=3) as c:`` starts a PostgreSQL server in a temporary directory on a free
loopback port (``oncelog.testing.pgserver``: needs PostgreSQL's server binaries; as root the server
runs as an unprivileged user), creates the store database, and starts brokers 1..N in cluster
mode (docs/CLUSTER.md). ``c.bootstrap_servers`` lists all of them. Each broker is an
``oncelog.testing.Broker`` (``c.brokers[i]``) with its faults: ``kill()``, ``pause()``/``resume()``,
``restart()``; ``c.restart_broker(i)`` starts a killed broker again, retrying while the store
still holds its old session. ``c.store`` is the PostgreSQL server (``restart("immediate")`` is
a crash of the store).

Broker properties: ``CLUSTER_DEFAULTS`` (short broker sessions, so a dead broker's partitions
move within seconds), then ``config``; ``env`` is added to every broker's environment (the
object store's credentials for diskless topics: ``make demo-cluster``, oncelog_tools/demo/cluster.py).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Mapping

from oncelog.testing.broker import Broker, BrokerError
from oncelog.testing.pgserver import PgServer

#: Cluster properties for tests: a broker's session expires 2 s after its last heartbeat, and
#: six partitions per internal topic so the coordinators spread over the brokers.
CLUSTER_DEFAULTS: dict[str, str] = {
    "broker.session.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "400",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
}


class Cluster:
    """N brokers on one PostgreSQL. Not thread-safe."""

    def __init__(self, brokers: int = 3, config: Mapping[str, object] | None = None, *,
                 base_dir: str | Path | None = None, startup_timeout: float = 60.0,
                 env: Mapping[str, str] | None = None) -> None:
        if brokers < 1:
            raise ValueError(f"a cluster needs at least one broker, {brokers} asked")
        self._tmp: Path | None = None
        if base_dir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="oncelog-cluster-"))
            base_dir = self._tmp
        self.base_dir = Path(base_dir)
        self.size = brokers
        self.config = {**CLUSTER_DEFAULTS, **{k: str(v) for k, v in (config or {}).items()}}
        self.startup_timeout = startup_timeout
        #: added to every broker's environment (e.g. an object store's AWS_* credentials, issue 29)
        self.env = dict(env) if env else None
        self.store: PgServer | None = None  # once started
        self.brokers: list[Broker] = []

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap_servers for b in self.brokers)

    def start(self) -> "Cluster":
        """Start the store and every broker; on any failure, stop what started and raise."""
        try:
            self.store = PgServer()  # its own directory, one the server's user can enter
            self.store.start()
            dsn = self.store.create_database("oncelog")
            for n in range(1, self.size + 1):
                b = Broker(self.config, data_dir=self.base_dir / f"broker{n}", node_id=n, store=dsn,
                           startup_timeout=self.startup_timeout, env=self.env)
                self.brokers.append(b)
                b.start()
        except BaseException:
            self.close()
            raise
        return self

    def restart_broker(self, i: int, attempts: int = 10) -> Broker:
        """Start broker ``i`` (index into ``brokers``) again after a kill, retrying while the
        store refuses its node id (its old session has not expired yet); bounded."""
        b = self.brokers[i]
        if b.running:
            b.kill()
        for attempt in range(attempts):
            try:
                return b.start()
            except BrokerError:
                if attempt == attempts - 1:
                    raise
                time.sleep(int(self.config["broker.session.timeout.ms"]) / 2000)
        raise AssertionError("unreachable")

    def log_tail(self, lines: int = 100) -> str:
        """The last lines of every broker's log, each under its node id."""
        return "\n".join(f"--- broker {b.node_id}: {b.log_path}\n{b.log_tail(lines)}" for b in self.brokers)

    def close(self) -> None:
        """Stop every broker and the store; remove the temporary directory if this made it."""
        try:
            for b in self.brokers:
                with contextlib.suppress(BrokerError):
                    b.stop()
                b.kill()
        finally:
            if self.store is not None:
                self.store.close()
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
