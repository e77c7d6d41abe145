"""Shared fixtures: a real broker process on a free loopback port."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Iterator

import pytest

from oncelog.process import BrokerProcess

#: Broker settings for tests: no delay before the first rebalance, fast retention checks.
TEST_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator:
    started: list[BrokerProcess] = []

    def make(name: str = "broker", overrides: dict[str, str] | None = None, **kw: object) -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, overrides={**TEST_OVERRIDES, **(overrides or {})}, **kw)  # type: ignore[arg-type]
        started.append(b)
        return b.start()

    yield make
    for b in started:
        try:
            code = b.stop()
        except Exception:
            b.kill()
            raise
        # A broker that crashes or hangs on SIGTERM fails the test that used it.
        assert code == 0, f"broker exited with {code}; log:\n{b.log_tail()}"


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


def pytest_report_header(config: pytest.Config) -> str:
    return f"oncelog tests; CI={os.environ.get('CI', '')}"


# -- PostgreSQL (cluster mode, issue 15) --------------------------------------------------------

_db_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator:
    """One real PostgreSQL server for the session (tests/pgserver.py). A machine without
    PostgreSQL fails the tests that need it, never skips them: install it (``.ci/run`` does)."""
    import pgserver

    try:
        server = pgserver.PgServer()
    except pgserver.PostgresMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_dsn(pg_server) -> Iterator[str]:
    """A fresh database on the session's server, dropped after the test: its DSN."""
    name = f"t{os.getpid()}_{next(_db_numbers)}"
    if not pg_server.running:  # a test that stopped the server and failed before restarting it
        pg_server.start()
    dsn = pg_server.create_database(name)
    yield dsn
    if not pg_server.running:
        pg_server.start()
    pg_server.drop_database(name)
