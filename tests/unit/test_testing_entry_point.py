"""The pytest plugin is registered as ``pytest11`` entry point ``oncelog`` (pyproject.toml) and
names a module that imports and defines the fixture and hooks (issue 19)."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_pytest11_entry_point_names_the_plugin_module() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    target = project["entry-points"]["pytest11"]["oncelog"]
    assert target == "oncelog.testing.plugin"
    module = importlib.import_module(target)
    for name in ("oncelog_broker", "pytest_addoption", "pytest_configure", "pytest_runtest_makereport"):
        assert hasattr(module, name), f"{target} lacks {name}"


def test_importing_the_plugin_stays_light() -> None:
    """pytest imports every registered plugin at start: the plugin must not pull in the broker
    or the Kafka protocol layer (kio) until a test asks for a broker."""
    import subprocess
    import sys

    code = ("import sys; import oncelog.testing.plugin; "
            "print(sorted(m for m in sys.modules if m.startswith(('kio', 'oncelog.broker', 'oncelog.protocol'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout
