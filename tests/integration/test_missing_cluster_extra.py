"""Cluster mode in an install without the ``cluster`` extra (issue 26, also seen): before,
``oncelog broker … --store postgresql://…`` died with a raw ``ModuleNotFoundError: No module
named 'psycopg'`` traceback; now every command with ``--store`` says in one line what to install
and exits non-zero. psycopg is made unimportable for the child process by a ``sitecustomize``
on its PYTHONPATH (``sys.modules['psycopg'] = None`` is Python's way to block an import), so
the real command line runs as it would in such an install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oncelog.process import free_port

STORE = "postgresql://nobody@127.0.0.1:1/none"


def _without_psycopg(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['psycopg'] = None\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "oncelog", *args], capture_output=True, text=True, timeout=60,
                          env=env)


@pytest.mark.parametrize("args", [
    ["broker", "--data-dir", "{tmp}/d", "--listen", "127.0.0.1:{port}", "--node-id", "1", "--store", STORE],
    ["users", "add", "alice", "--password", "pw", "--store", STORE],
    ["acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t", "--store", STORE],
], ids=["broker", "users", "acls"])
def test_store_without_the_cluster_extra_says_what_to_install(tmp_path: Path, args: list[str]) -> None:
    argv = [a.format(tmp=tmp_path, port=free_port()) for a in args]
    r = _without_psycopg(tmp_path, *argv)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "Traceback" not in out and "ModuleNotFoundError" not in out, out
    assert "oncelog[cluster]" in out, out
    lines = [line for line in out.splitlines() if "oncelog[cluster]" in line]
    assert len(lines) == 1, out
