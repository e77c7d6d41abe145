"""The README's two commands are the whole set-up (issue 26, also seen): `make test` on a fresh
machine with Java and PostgreSQL but no Chromium errored in the console's browser test, because
only `.ci/run` installed system packages. Now one script (scripts/system-deps.sh) installs what
is missing, and both `.ci/run` and the Makefile's `test` (and `demo`, `cluster`, `venv`) call
it; it is silent and quick when everything is there and fails loudly when it cannot install."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "system-deps.sh"


def _recipe(target: str) -> list[str]:
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^{re.escape(target)}:", line))
    out = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        out.append(line.strip())
    return out


def test_make_test_and_ci_install_the_system_packages_through_one_script() -> None:
    test = _recipe("test")
    assert test[0].lstrip("@") == "scripts/system-deps.sh test", test
    assert any("pytest" in line for line in test[1:]), test
    assert "scripts/system-deps.sh java" in " ".join(_recipe("demo"))
    assert "scripts/system-deps.sh build" in " ".join(_recipe("$(STAMP)"))
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^scripts/system-deps\.sh$", ci, re.M) and re.search(r"^make test$", ci, re.M), ci
    assert "apt-get" not in ci  # the one place is the script
    readme = (ROOT / "README.md").read_text().split("```")[1].strip().splitlines()
    assert [line.split("#")[0].strip() for line in readme[:2]] == ["make demo", "make test"]


def test_make_demo_cluster_sets_itself_up() -> None:
    """``make demo-cluster`` (issue 29) installs what it needs as ``make demo`` and ``make
    cluster`` do: Java and PostgreSQL through the script, the ``cluster`` extra (SeaweedFS)."""
    recipe = " ".join(_recipe("demo-cluster"))
    assert "scripts/system-deps.sh java postgresql" in recipe, recipe
    assert "'.[cluster]'" in recipe and "oncelog_tools.demo.cluster" in recipe, recipe


def test_silent_and_quick_when_everything_is_installed() -> None:
    """This machine runs the suite, so it has everything (the suite's own tests fail without)."""
    t0 = time.monotonic()
    r = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r
    assert time.monotonic() - t0 < 10


def test_fails_loudly_when_it_cannot_install(tmp_path: Path) -> None:
    """No `java` on PATH and an apt-get that fails: a non-zero exit naming the package, never
    a silent success that lets the suite skip."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("id", "sort", "bash"):
        found = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        os.symlink(found, bin_dir / tool)
    stub = bin_dir / "apt-get"
    stub.write_text("#!/bin/sh\necho 'E: simulated failure' >&2\nexit 100\n")
    stub.chmod(0o755)
    bash = str(bin_dir / "bash")
    r = subprocess.run([bash, str(SCRIPT), "java"], capture_output=True, text=True, timeout=60,
                       env={"PATH": str(bin_dir), "HOME": str(tmp_path)})
    assert r.returncode != 0, r
    assert "openjdk-17-jre-headless" in r.stderr and "cannot install" in r.stderr, r
