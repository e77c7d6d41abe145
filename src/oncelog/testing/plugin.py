"""The pytest plugin ``oncelog`` (entry point ``pytest11``): the fixture ``oncelog_broker``.

``oncelog_broker`` is an ``oncelog.testing.Broker`` already started: a real broker process on a
free loopback port, its data in a directory from ``tmp_path_factory``. Its scope is the ini
option ``oncelog_broker_scope`` (``function`` by default; ``class``, ``module``, ``package`` or
``session`` share one broker between the tests of that scope).

Broker properties, later ones winning: ``oncelog.testing.TEST_DEFAULTS``; the ini option
``oncelog_broker_config`` (lines of ``key=value``); the marker
``@pytest.mark.oncelog_broker(config={...})`` nearest to the fixture's scope (on the test for
function scope, on the class or module (``pytestmark``) for those scopes). A marker on a single
test while the scope is wider is a usage error, not silently ignored.

With function scope the next test's broker is started while a test runs (``Spare``, spare.py),
so a test that asks for one finds it ready; the ini option ``oncelog_broker_prestart = false``
turns that off.

``oncelog_cluster`` (cluster.py) is N brokers on one PostgreSQL, with the marker
``@pytest.mark.oncelog_cluster(brokers=3, config={...})`` and the ini option
``oncelog_cluster_scope``; a shared cluster is not healed between tests.

When a test that used the fixture fails, the tail of the broker log is added to its report as
the section "oncelog broker log". After each test, a shared (wider than function) broker that
the test paused or killed is resumed or started again, so a fault stays in its test.
"""

from __future__ import annotations

import importlib
import threading
from typing import Iterator

import pytest

from oncelog.testing.broker import Broker
from oncelog.testing.cluster import Cluster
from oncelog.testing.spare import Spare

SCOPES = ("function", "class", "module", "package", "session")
LOG_SECTION = "oncelog broker log"
_SPARE = pytest.StashKey[Spare]()
_LOG_LINES = 200


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("oncelog_broker_scope", f"scope of the oncelog_broker fixture: {', '.join(SCOPES)}",
                  default="function")
    parser.addini("oncelog_broker_config", "broker properties for oncelog_broker, one key=value a line",
                  type="linelist", default=[])
    parser.addini("oncelog_cluster_scope", f"scope of the oncelog_cluster fixture: {', '.join(SCOPES)}",
                  default="function")
    parser.addini("oncelog_broker_prestart", "with function scope, start the next test's broker while a test runs "
                  "(default true)", type="bool", default=True)


def pytest_configure(config: pytest.Config) -> None:
    for option in ("oncelog_broker_scope", "oncelog_cluster_scope"):
        scope = str(config.getini(option)).strip() or "function"
        if scope not in SCOPES:
            raise pytest.UsageError(f"{option} = {scope!r}: expected one of {', '.join(SCOPES)}")
    config.stash[_SPARE] = Spare()
    config.addinivalue_line(
        "markers", "oncelog_broker(config=None): broker properties (Kafka names) for the oncelog_broker fixture")
    config.addinivalue_line(
        "markers", "oncelog_cluster(brokers=3, config=None): size and broker properties for the oncelog_cluster fixture")


def _configured_scope(config: pytest.Config) -> str:
    return str(config.getini("oncelog_broker_scope")).strip() or "function"


def _scope(*, fixture_name: str, config: pytest.Config) -> str:
    """The fixture's scope (pytest calls this once; pytest_configure has refused a bad value)."""
    scope = _configured_scope(config)
    return scope if scope in SCOPES else "function"


def _ini_config(config: pytest.Config) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in config.getini("oncelog_broker_config"):
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"oncelog_broker_config: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def _marker_config(node: pytest.Item | pytest.Collector | None) -> dict[str, str]:
    marker = node.get_closest_marker("oncelog_broker") if node is not None else None
    if marker is None:
        return {}
    cfg = marker.kwargs.get("config", marker.args[0] if marker.args else None) or {}
    if not isinstance(cfg, dict):
        raise pytest.UsageError(f"@pytest.mark.oncelog_broker(config=...) takes a dict, got {cfg!r}")
    return {str(k): str(v) for k, v in cfg.items()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    scope = _configured_scope(config)
    if scope == "function":
        return
    for item in items:
        if any(m.name == "oncelog_broker" for m in getattr(item, "own_markers", ())):
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.oncelog_broker on a test needs oncelog_broker_scope = function "
                f"(it is {scope}); mark the {scope} instead")


_warmed = False


def _warm_admin_client() -> None:
    """Import the protocol client (kio) in a background thread while the first broker starts, so
    the first ``create_topic`` does not pay for it (once per session)."""
    global _warmed
    if not _warmed:
        _warmed = True
        threading.Thread(target=importlib.import_module, args=("oncelog.admin.topics",), daemon=True,
                         name="oncelog-import-client").start()


@pytest.fixture(scope=_scope)
def oncelog_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A running oncelog broker (``oncelog.testing.Broker``): ``bootstrap_servers``,
    ``create_topic()``, ``kill()``, ``restart()``, ``pause()``/``resume()``, ``log``/``log_tail()``."""
    node = getattr(request, "node", None)
    config = {**_ini_config(request.config), **_marker_config(node)}
    _warm_admin_client()
    spare = request.config.stash.get(_SPARE, None)
    if request.scope != "function" or not request.config.getini("oncelog_broker_prestart"):
        spare = None
    broker = spare.take(config) if spare is not None else None
    if broker is None:
        broker = Broker(config, data_dir=tmp_path_factory.mktemp("oncelog") / "data")
        broker.start()
    if spare is not None:  # the next test's broker starts while this one runs
        spare.prepare(config, tmp_path_factory.mktemp("oncelog") / "data")
    try:
        yield broker
    finally:
        broker.close()


def _cluster_scope(*, fixture_name: str, config: pytest.Config) -> str:
    scope = str(config.getini("oncelog_cluster_scope")).strip() or "function"
    return scope if scope in SCOPES else "function"


@pytest.fixture(scope=_cluster_scope)
def oncelog_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A running ``oncelog.testing.Cluster``: ``brokers`` (each an ``oncelog.testing.Broker``
    with its faults), ``bootstrap_servers``, ``restart_broker(i)``, ``store`` (the PostgreSQL
    server). Size and properties: ``@pytest.mark.oncelog_cluster(brokers=3, config={...})``
    nearest to the fixture's scope (ini ``oncelog_cluster_scope``, function by default)."""
    node = getattr(request, "node", None)
    marker = node.get_closest_marker("oncelog_cluster") if node is not None else None
    size = int(marker.kwargs.get("brokers", 3)) if marker is not None else 3
    config = dict(marker.kwargs.get("config") or {}) if marker is not None else {}
    cluster = Cluster(size, config, base_dir=tmp_path_factory.mktemp("oncelog-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()


def pytest_unconfigure(config: pytest.Config) -> None:
    spare = config.stash.get(_SPARE, None)
    if spare is not None:
        spare.discard()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    broker = getattr(item, "funcargs", {}).get("oncelog_broker")
    if isinstance(broker, Broker) and _configured_scope(item.config) != "function":
        broker.ensure_running()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:
        broker = getattr(item, "funcargs", {}).get("oncelog_broker")
        if isinstance(broker, Broker):
            report.sections.append(
                (LOG_SECTION, f"{broker.log_path} (last {_LOG_LINES} lines)\n{broker.log_tail(_LOG_LINES)}"))
        cluster = getattr(item, "funcargs", {}).get("oncelog_cluster")
        if isinstance(cluster, Cluster):
            report.sections.append(("oncelog cluster logs", cluster.log_tail(_LOG_LINES // 2)))
    return report
