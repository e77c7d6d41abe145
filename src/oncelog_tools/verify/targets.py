"""What ``oncelog verify`` runs against and how it is hurt: one broker, or a cluster on PostgreSQL.

A target has ``bootstrap`` (for every client), ``fault(rng)`` (one fault, chosen and applied;
returns its name for the report: the target is serving again, or recovering by itself, when it
returns) and ``stop()``.

* ``SingleBroker``: the embedded broker; its one fault is SIGKILL, then a restart after up to
  1.5 s (the data directory's recovery, R7).
* ``Cluster`` (issue 15): PostgreSQL in a temporary directory (oncelog.testing.pgserver) and N
  brokers on it, with a short session (broker.session.timeout.ms) so that faults move leaders
  and coordinators during the run. Faults, one chosen at random each time:
  - ``broker SIGKILL``: a random broker (a partition leader, and the transaction or group
    coordinator of some copiers) is killed and restarted after up to 1.5 s; a restart refused
    because the old session is still live (DUPLICATE_BROKER_REGISTRATION) is retried until the
    session expired;
  - ``broker SIGSTOP past its session``: a random broker is paused for the session timeout plus
    a second (its partitions move; on SIGCONT the zombie must neither append nor answer a stale
    commit: every append is fenced by its leader epoch in the store), then resumed;
  - ``PostgreSQL restart (fast|immediate)``: the store goes away for a moment; brokers answer
    retriable errors meanwhile and lose nothing acknowledged.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Protocol

from oncelog.process import BrokerProcess

__all__ = ["Cluster", "SingleBroker", "Target"]

#: broker overrides of a verify cluster: short sessions so faults move leaders quickly
CLUSTER_SESSION_MS = 2000


class Target(Protocol):
    bootstrap: str

    def fault(self, rng: random.Random) -> str: ...

    def stop(self, keep_data: bool = False) -> None:
        """Stop everything; ``keep_data`` (a failed run): leave the store's files for a post-mortem."""
        ...


class SingleBroker:
    def __init__(self, work: Path, overrides: dict[str, str]) -> None:
        self.broker = BrokerProcess(work / "data", log_path=work / "broker.log", overrides=overrides)
        self.broker.start()
        self.bootstrap = self.broker.bootstrap

    def fault(self, rng: random.Random) -> str:
        self.broker.kill()
        time.sleep(rng.uniform(0.0, 1.5))
        self.broker.start(timeout=60)
        return "broker SIGKILL"

    def stop(self, keep_data: bool = False) -> None:
        self.broker.stop()  # the data dir is the work dir's: always kept


class Cluster:
    def __init__(self, work: Path, overrides: dict[str, str], *, brokers: int = 3, env: dict[str, str] | None = None,
                 store_fault: "Callable[[], str] | None" = None) -> None:
        """``env``: added to the brokers' environment (issue 29: the object store's AWS_*
        credentials); ``store_fault``: one more kind of fault, the object store's (it returns its
        description), drawn as often as a PostgreSQL restart."""
        self.store_fault = store_fault
        from oncelog.testing.pgserver import PgServer

        self.pg = PgServer()
        self.pg.start()
        dsn = self.pg.create_database("oncelog")
        self.overrides = {"broker.session.timeout.ms": str(CLUSTER_SESSION_MS), "broker.heartbeat.interval.ms": "400",
                          "offsets.topic.num.partitions": "6", "transaction.state.log.num.partitions": "6",
                          **overrides}
        self.brokers = [BrokerProcess(work / f"data{n}", log_path=work / f"broker{n}.log", node_id=n, store=dsn,
                                      overrides=self.overrides, env=env) for n in range(1, brokers + 1)]
        try:
            for b in self.brokers:
                b.start(timeout=60)
        except BaseException:
            self.stop()
            raise
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers)

    def fault(self, rng: random.Random) -> str:
        kind = rng.choice(["kill", "kill", "pause", "pg"] + (["store"] if self.store_fault else []))
        if kind == "store":
            assert self.store_fault is not None
            return self.store_fault()
        if kind == "pg":
            mode = rng.choice(["fast", "immediate"])
            self.pg.restart(mode)
            return f"PostgreSQL restart ({mode})"
        b = rng.choice(self.brokers)
        if kind == "pause":
            assert b.proc is not None
            os.kill(b.proc.pid, signal.SIGSTOP)
            time.sleep(CLUSTER_SESSION_MS / 1000 + 1.0)
            os.kill(b.proc.pid, signal.SIGCONT)
            return "broker SIGSTOP past its session"
        b.kill()
        time.sleep(rng.uniform(0.0, 1.5))
        self._restart(b)
        return "broker SIGKILL"

    @staticmethod
    def _restart(b: BrokerProcess) -> None:
        """Start ``b`` again; while its old session is live the store refuses the node id: retry
        (bounded: the session expires within CLUSTER_SESSION_MS)."""
        for attempt in range(10):
            try:
                b.start(timeout=60)
                return
            except RuntimeError:
                if attempt == 9:
                    raise
                time.sleep(CLUSTER_SESSION_MS / 1000 / 2)

    def stop(self, keep_data: bool = False) -> None:
        for b in self.brokers:
            try:
                b.stop(timeout=30)
            except Exception:  # noqa: BLE001 - stopping what is left
                b.kill()
        if keep_data:  # a failed run: the store is the evidence (run 6 of 2026-11-24 lost it)
            self.pg.stop("fast")
            print(f"PostgreSQL data of this run kept in {self.pg.data} (pg_ctl start -D it as user "
                  f"{getattr(self.pg.user, 'name', self.pg.user)} to inspect)", file=sys.stderr)
        else:
            self.pg.close()
