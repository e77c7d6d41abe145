"""Kafka clients' own test suites, fetched and prepared for a run against an oncelog broker
(tests/suites/). Nothing third-party is committed: the sources come from the package registries
at test time (pip's sdist of kafka-python; npm's @confluentinc/kafka-javascript, which carries
librdkafka's source tree and its tests under deps/librdkafka) and are kept, with what is built
from them, under ``build/client-suites/`` (ignored by git), so a second run reuses them.

A download or build that fails raises: the suites never turn into skips (in CI a missing client
fails the run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("ONCELOG_CLIENT_SUITES", ROOT / "build" / "client-suites"))

KAFKA_PYTHON = "3.0.12"  # pinned in pyproject.toml's test extra too
#: the npm package whose deps/librdkafka is librdkafka's source tree; 1.10.1 carries librdkafka
#: 2.15.1, the newest on npm (confluent-kafka 2.16.1 bundles librdkafka 2.16.0, not on npm)
KAFKA_JAVASCRIPT = "1.10.1"
LIBRDKAFKA_OF_IT = "2.15.1"


def _run(cmd: list[str], cwd: Path, timeout: float, log: Path) -> None:
    with open(log, "ab") as out:
        done = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    if done.returncode != 0:
        tail = log.read_bytes()[-3000:].decode(errors="replace")
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}) in {cwd}:\n{tail}")


def _extract(archive: Path, into: Path) -> None:
    """Extract ``archive`` refusing links and paths outside ``into`` (tarfile's "data" filter,
    where this Python has it: 3.11.4+)."""
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:  # pragma: no cover - Pythons before 3.11.4
            root = into.resolve()
            for member in tar.getmembers():
                if not (member.isfile() or member.isdir()) or not (root / member.name).resolve().is_relative_to(root):
                    raise RuntimeError(f"{archive.name}: refusing {member.name}")
            tar.extractall(into)


def kafka_python_suite() -> Path:
    """kafka-python's sdist, extracted, with the two files its integration tests import that the
    sdist lacks: ``test/__init__.py`` (else Python's own ``test`` package is found first) and
    ``test/service.py`` (the process runner of its own Kafka fixture, unused against an external
    broker: a stand-in that runs nothing). Returns the sdist's directory."""
    home = CACHE / f"kafka_python-{KAFKA_PYTHON}"
    if (home / ".ready").exists():
        return home
    CACHE.mkdir(parents=True, exist_ok=True)
    log = CACHE / "kafka-python.log"
    _run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--dest", str(CACHE),
          f"kafka-python=={KAFKA_PYTHON}"], CACHE, 600, log)
    sdist = CACHE / f"kafka_python-{KAFKA_PYTHON}.tar.gz"
    shutil.rmtree(home, ignore_errors=True)
    _extract(sdist, CACHE)
    (home / "test" / "__init__.py").touch()
    (home / "test" / "service.py").write_text(
        '"""oncelog\'s stand-in: the suite runs against an external broker (KAFKA_URI), never its own."""\n\n\n'
        "class ExternalService:\n"
        "    def __init__(self, host, port):\n"
        "        self.host, self.port = host, port\n\n"
        "    def start(self):\n        pass\n\n"
        "    def stop(self):\n        pass\n\n"
        "    def dump_logs(self):\n        pass\n\n"
        "    def wait_for(self, pattern, timeout=30):\n        return True\n\n\n"
        "class SpawnedService:\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        raise RuntimeError('this run uses an external broker (KAFKA_URI)')\n")
    (home / "kafka-root").mkdir(exist_ok=True)  # its fixture wants KAFKA_ROOT to exist
    (home / ".ready").touch()
    return home


def librdkafka_tree() -> Path:
    """librdkafka's source tree from the npm package, with its library and its test runner
    (``tests/test-runner``) built (a few minutes on two cores, once). Returns the tree."""
    tree = CACHE / f"kafka-javascript-{KAFKA_JAVASCRIPT}" / "package" / "deps" / "librdkafka"
    if (tree / ".built").exists():
        return tree
    if shutil.which("npm") is None:
        raise RuntimeError("npm is needed to fetch librdkafka's sources (scripts/system-deps.sh test installs it)")
    CACHE.mkdir(parents=True, exist_ok=True)
    log = CACHE / "librdkafka-build.log"
    pack = CACHE / "npm"
    pack.mkdir(exist_ok=True)
    _run(["npm", "pack", "--silent", f"@confluentinc/kafka-javascript@{KAFKA_JAVASCRIPT}"], pack, 600, log)
    tgz = next(pack.glob("confluentinc-kafka-javascript-*.tgz"))
    top = tree.parents[2]
    shutil.rmtree(top, ignore_errors=True)
    top.mkdir(parents=True)
    _extract(tgz, top)
    version = (tree / "src" / "rdkafka.h").read_text()
    if f"{LIBRDKAFKA_OF_IT}" not in _header_version(version):
        raise RuntimeError(f"{tgz.name} does not carry librdkafka {LIBRDKAFKA_OF_IT}")
    jobs = str(max(1, min(4, os.cpu_count() or 1)))
    _run(["./configure", "--disable-ssl", "--disable-gssapi", "--disable-curl", "--disable-zstd",
          "--disable-lz4-ext"], tree, 600, log)
    _run(["make", "-j", jobs, "libs"], tree, 3600, log)
    _run(["make", "-j", jobs, "test-runner"], tree / "tests", 3600, log)
    (tree / ".built").touch()
    return tree


def _header_version(header: str) -> str:
    """``RD_KAFKA_VERSION`` of rdkafka.h as "major.minor.patch"."""
    for line in header.splitlines():
        if line.startswith("#define RD_KAFKA_VERSION ") and "0x" in line:
            v = int(line.split()[2], 16)
            return f"{v >> 24 & 0xff}.{v >> 16 & 0xff}.{v >> 8 & 0xff}"
    return "?"


if __name__ == "__main__":  # `make test` prepares both before the suite runs (minutes, once)
    print(f"client suites: kafka-python {KAFKA_PYTHON} in {kafka_python_suite()}", flush=True)
    print(f"client suites: building librdkafka {LIBRDKAFKA_OF_IT}'s tests (minutes, once) ...", flush=True)
    print(f"client suites: librdkafka's test runner in {librdkafka_tree() / 'tests'}", flush=True)
