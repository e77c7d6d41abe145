"""``Broker``: a real oncelog broker process for a test, as a context manager.

``with Broker() as b:`` starts ``oncelog broker`` on a free loopback port in a temporary data
directory and waits for its ready line; ``b.bootstrap_servers`` is what a Kafka client needs.
Leaving the block stops it (SIGTERM, then SIGKILL if it does not exit) and removes the temporary
directory. The pytest fixture ``oncelog_broker`` (plugin.py) yields the same object.

Faults a test can inject: ``kill()`` (SIGKILL: nothing flushed, nothing cleaned up), ``pause()``
and ``resume()`` (SIGSTOP/SIGCONT: the process is alive, its sockets open, and it answers
nothing), ``restart()`` (clean stop or, with ``hard=True``, SIGKILL, then start again at the same
address with the same data). Acknowledged data survives all of them.

Broker properties: ``TEST_DEFAULTS`` below, then ``config`` (Kafka's property names, the same
``-o key=value`` overrides ``oncelog broker`` takes). Every wait is bounded by
``startup_timeout``.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Mapping

from oncelog.process import BrokerProcess

#: Properties a broker for tests starts with (``config`` overrides them). Two internal topics of
#: one partition each instead of Kafka's 50 + 50: a test has a handful of groups and
#: transactional ids, and each partition costs files and time at start. No delay before a
#: group's first rebalance (Kafka's test harnesses set the same).
TEST_DEFAULTS: dict[str, str] = {
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
}


class BrokerError(RuntimeError):
    """The broker did something a test did not ask for: it died on its own, or did not stop
    cleanly on SIGTERM. The message carries the tail of its log."""


class Broker:
    """One broker process for tests. Not thread-safe: drive it from one thread.

    ``data_dir``: where the broker keeps its logs (default: a new temporary directory, removed
    by ``close()``); the log of the process itself is written next to it (``log_path``).
    ``port``: fixed at construction (a free one by default), kept across restarts.
    ``node_id`` and ``store`` (a PostgreSQL URL) make it a cluster member (cluster.py).
    """

    def __init__(self, config: Mapping[str, object] | None = None, *, data_dir: str | os.PathLike[str] | None = None,
                 host: str = "127.0.0.1", port: int | None = None, startup_timeout: float = 30.0,
                 env: Mapping[str, str] | None = None, node_id: int | None = None, store: str | None = None) -> None:
        self.config: dict[str, str] = {**TEST_DEFAULTS, **{k: str(v) for k, v in (config or {}).items()}}
        self._tmp: Path | None = None
        if data_dir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="oncelog-"))
            data_dir = self._tmp / "data"
        self.data_dir = Path(data_dir)
        self.startup_timeout = startup_timeout
        self._proc = BrokerProcess(self.data_dir, host=host, port=port, overrides=self.config,
                                   env=dict(env) if env else None, node_id=node_id, store=store)
        self.node_id = node_id
        self._paused = False
        self._down_expected = True  # False while it runs and nobody asked it to stop
        #: ``time.monotonic()`` when the last start began and when the broker became ready
        self.started_at: float | None = None
        self.ready_at: float | None = None

    # -- addresses and state -----------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``HOST:PORT`` for a Kafka client's ``bootstrap.servers`` / ``bootstrap_servers``."""
        return self._proc.bootstrap

    @property
    def host(self) -> str:
        return self._proc.host

    @property
    def port(self) -> int:
        return self._proc.port

    @property
    def pid(self) -> int | None:
        """The process id while it runs, else None."""
        return self._proc.pid if self.running else None

    @property
    def running(self) -> bool:
        """True while the process exists (paused counts as running)."""
        p = self._proc.proc
        return p is not None and p.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused and self.running

    @property
    def log_path(self) -> Path:
        """The broker's own log (its standard error), appended to across restarts."""
        return self._proc.log_path

    @property
    def log(self) -> str:
        """The whole broker log so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 200) -> str:
        """The last ``lines`` lines of the broker log."""
        return "\n".join(self.log.splitlines()[-lines:])

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "Broker":
        """Start the process and return once it accepts connections. Raises ``BrokerError`` if
        it exits or is not ready within ``startup_timeout`` (with the log tail)."""
        if self.running:
            raise BrokerError(f"broker {self.bootstrap_servers} is already running")
        self.started_at = time.monotonic()
        try:
            self._proc.start(timeout=self.startup_timeout)
        except (RuntimeError, TimeoutError) as exc:
            raise BrokerError(str(exc)) from None
        self._paused = False
        self._down_expected = False
        self.ready_at = time.monotonic()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop cleanly (SIGTERM; a paused broker is resumed first so it can see it). Raises
        ``BrokerError`` if it had died on its own, exits with a non-zero status, or does not exit
        within ``timeout`` (it is then killed)."""
        died = not self.running and not self._down_expected
        if self.running:
            self.resume()
            self._down_expected = True
            try:
                code = self._proc.stop(timeout=timeout)
            except Exception as exc:
                self._proc.kill()
                raise BrokerError(f"broker did not stop within {timeout}s ({exc}); log:\n{self.log_tail()}") from None
            if code != 0:
                raise BrokerError(f"broker exited with status {code} on SIGTERM; log:\n{self.log_tail()}")
        self._down_expected = True
        if died:
            code = self._proc.proc.returncode if self._proc.proc else None
            raise BrokerError(f"broker died during the test (exit status {code}); log:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to flush or clean up. ``start()`` or
        ``restart()`` brings it back with the same data and address."""
        self._down_expected = True
        self._paused = False
        self._proc.kill()

    def restart(self, *, hard: bool = False) -> "Broker":
        """Stop (SIGTERM, or SIGKILL with ``hard=True``) if running, then start again."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    def pause(self) -> None:
        """SIGSTOP: the process stays, its connections stay open, and nothing is answered until
        ``resume()``. Clients see timeouts, not refused connections."""
        if not self.running:
            raise BrokerError("cannot pause a broker that is not running")
        os.kill(self._proc.pid, signal.SIGSTOP)  # type: ignore[arg-type]
        self._paused = True

    def resume(self) -> None:
        """SIGCONT after ``pause()``; harmless otherwise."""
        if self.running and self._paused:
            os.kill(self._proc.pid, signal.SIGCONT)  # type: ignore[arg-type]
        self._paused = False

    def ensure_running(self) -> None:
        """Resume a paused broker and start a stopped or killed one (the plugin calls this after
        each test that used a shared broker, so one test's fault does not leak into the next)."""
        self.resume()
        if not self.running:
            self.start()

    def close(self) -> None:
        """Stop (as ``stop()``) and remove the temporary data directory, if this object made it.
        The directory goes even when stopping raises."""
        try:
            self.stop()
        finally:
            self._proc.kill()
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "Broker":
        try:
            return self.start()
        except BaseException:
            self.close()  # `with` calls no __exit__ when __enter__ raises: the temporary directory goes here
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- administration ----------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, object] | None = None, *,
                     exist_ok: bool = False) -> None:
        """Create a topic through the Kafka protocol (CreateTopics). Raises the broker's
        ``oncelog.protocol.errors.KafkaError`` (``TopicAlreadyExists`` unless ``exist_ok``,
        ``InvalidConfig``, ...)."""
        from oncelog.admin.topics import create_topic

        create_topic(self.bootstrap_servers, name, partitions, config, exist_ok=exist_ok)

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "stopped"
        return f"<oncelog.testing.Broker {self.bootstrap_servers} {state} data={self.data_dir}>"
