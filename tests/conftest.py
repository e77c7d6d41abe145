"""Shared fixtures: a real broker process on a free loopback port."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path
from typing import Iterator

import pytest

from oncelog.process import BrokerProcess

#: Broker settings for tests: no delay before the first rebalance, fast retention checks.
TEST_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
}


class _SpareBroker:
    """The next test's default broker (``TEST_OVERRIDES``, no environment), started in a
    background thread while the current one runs: a start is 1-3 s of a test's setup on this
    2-core machine, and most tests use such a broker. At most one spare; one that failed to
    start or died while waiting is killed and the test gets a fresh start, as before. Its data
    directory is under the session's base temporary directory (``spare-brokers``), not the
    test's ``tmp_path``; nothing here looks for it there."""

    def __init__(self, base: Path) -> None:
        self._base = base
        self._numbers = itertools.count(1)
        self._broker: BrokerProcess | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def prepare(self) -> None:
        if self._broker is not None:
            return
        b = BrokerProcess(self._base / f"spare{next(self._numbers)}" / "broker", overrides=dict(TEST_OVERRIDES))
        self._broker, self._error = b, None

        def run() -> None:
            try:
                b.start()
            except BaseException as exc:  # noqa: BLE001 - take() falls back to a fresh start
                self._error = exc

        self._thread = threading.Thread(target=run, name="spare-broker", daemon=True)
        self._thread.start()

    def take(self) -> BrokerProcess | None:
        b, self._broker = self._broker, None
        if b is None:
            return None
        assert self._thread is not None
        self._thread.join(90)
        if self._thread.is_alive() or self._error is not None or b.proc is None or b.proc.poll() is not None:
            b.kill()
            return None
        return b

    def discard(self) -> None:
        b = self.take()
        if b is not None:
            try:
                b.stop()
            except Exception:  # noqa: BLE001 - a broker no test used
                b.kill()


@pytest.fixture(scope="session")
def _spare_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_SpareBroker]:
    spare = _SpareBroker(tmp_path_factory.mktemp("spare-brokers"))
    yield spare
    spare.discard()


@pytest.fixture
def broker_factory(tmp_path: Path, request: pytest.FixtureRequest, _spare_broker: _SpareBroker) -> Iterator:
    """``make()`` starts a broker in ``tmp_path / name``; the default one (no name, properties
    or environment of its own) is the spare when there is one. The next spare starts while the
    test runs, unless the test module sets ``START_SPARE_BROKER_DURING_TESTS = False`` (its tests
    measure how fast the broker answers, and a broker starting next to them takes a core): then
    it starts once the test is over."""
    started: list[BrokerProcess] = []
    during = getattr(request.module, "START_SPARE_BROKER_DURING_TESTS", True)
    used_default: list[bool] = []

    def make(name: str = "broker", overrides: dict[str, str] | None = None, **kw: object) -> BrokerProcess:
        if name == "broker" and not overrides and not kw and not used_default:
            used_default.append(True)
            b = _spare_broker.take()
            if b is None:
                b = BrokerProcess(tmp_path / name, overrides=dict(TEST_OVERRIDES)).start()
            started.append(b)
            if during:
                _spare_broker.prepare()
            return b
        b = BrokerProcess(tmp_path / name, overrides={**TEST_OVERRIDES, **(overrides or {})}, **kw)  # type: ignore[arg-type]
        started.append(b)
        return b.start()

    yield make
    if used_default and not during:
        _spare_broker.prepare()
    for b in started:
        _stop_cleanly(b)


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for every test of a module that uses it: for tests that never restart, kill
    or reconfigure it and touch only topics and groups of their own names, so that sharing it
    couples nothing (a broker start and stop is 1-3 s of each test otherwise). A broker that
    crashes or hangs on SIGTERM fails the module's last test that used it."""
    b = BrokerProcess(tmp_path_factory.mktemp("module-broker") / "broker", overrides=dict(TEST_OVERRIDES))
    b.start()
    yield b
    _stop_cleanly(b)


def _stop_cleanly(b: BrokerProcess) -> None:
    """Stop ``b`` with SIGTERM (SIGKILL if that fails): a broker that crashes or hangs on SIGTERM
    fails the test that used it."""
    try:
        code = b.stop()
    except Exception:
        b.kill()
        raise
    assert code == 0, f"broker exited with {code}; log:\n{b.log_tail()}"


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
