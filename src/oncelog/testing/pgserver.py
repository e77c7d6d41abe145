"""A real PostgreSQL server in a temporary directory, on a free loopback port: the store of
``oncelog.testing.Cluster`` (the product's testing API), and through it the tests' fixtures
(tests/pgserver.py, tests/conftest.py) and the tools (`python -m oncelog_tools.cluster`, the
benchmarks). It lives in the product because ``Cluster`` needs it and the product never imports
``oncelog_tools`` (issue 27); the tools import it from here. Standard library only.

Theory of operation. ``PgServer.start()`` runs ``initdb`` into ``<base>/data`` and starts the
server with ``pg_ctl`` on 127.0.0.1 only, its unix socket in ``<base>/sock`` (a directory only
the server's user can enter), fsync and synchronous commit on (durability is what the cluster
tests check), trust authentication for loopback TCP and that socket and nothing else. The
server runs as an unprivileged user: PostgreSQL refuses to run as root, so when the tests run as
root the server runs as ``postgres`` (Debian's package creates it), or as a dedicated user made
with ``useradd`` when there is none; otherwise it runs as whoever runs the tests.

``stop(mode)`` is ``pg_ctl stop -m fast|immediate|smart``: ``immediate`` is a crash (no
checkpoint; the next start replays the WAL), which is what the fault tests need; ``start()``
again reuses the same data directory and port. ``close()`` stops the server (immediate) and
removes the directory. Every wait here is bounded in time.

The binaries are found with ``pg_config --bindir`` when that directory holds ``initdb``,
otherwise as the newest ``/usr/lib/postgresql/<version>/bin``. ``PostgresMissing`` says how to
install them; the fixtures turn it into a failure, never a skip (see tests/conftest.py).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PgServer", "PostgresMissing", "find_bindir", "server_user"]

#: The user made when the tests run as root and no ``postgres`` user exists.
DEDICATED_USER = "oncelog-pg"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 60


class PostgresMissing(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def find_bindir() -> Path:
    """The directory of ``initdb``, ``pg_ctl`` and ``postgres``; raises PostgresMissing."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
            candidates.append(Path(out.stdout.strip()))
        except (OSError, subprocess.SubprocessError):
            pass

    def version(path: str) -> tuple[int, ...]:
        name = Path(path).parent.name
        return tuple(int(x) for x in name.split(".") if x.isdigit()) or (0,)

    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)]
    for c in candidates:
        if (c / "initdb").is_file() and (c / "pg_ctl").is_file():
            return c
    raise PostgresMissing(
        "PostgreSQL server binaries not found (no initdb under `pg_config --bindir` nor "
        "/usr/lib/postgresql/*/bin); install them: apt-get install -y postgresql"
    )


@dataclass(frozen=True)
class ServerUser:
    name: str
    uid: int
    gid: int


def server_user() -> ServerUser:
    """Who runs the server: the current user, or (as root) ``postgres`` or a dedicated user."""
    if os.geteuid() != 0:
        pw = pwd.getpwuid(os.geteuid())
        return ServerUser(pw.pw_name, pw.pw_uid, pw.pw_gid)
    for name in ("postgres", DEDICATED_USER):
        try:
            pw = pwd.getpwnam(name)
            return ServerUser(pw.pw_name, pw.pw_uid, pw.pw_gid)
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", DEDICATED_USER],
                   check=True, capture_output=True, timeout=30)
    pw = pwd.getpwnam(DEDICATED_USER)
    return ServerUser(pw.pw_name, pw.pw_uid, pw.pw_gid)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One PostgreSQL server in a temporary directory. Not thread-safe."""

    def __init__(self, base: Path | None = None, *, bindir: Path | None = None) -> None:
        self.bindir = bindir or find_bindir()
        self.user = server_user()
        self.base = Path(base or tempfile.mkdtemp(prefix="oncelog-pg-"))
        self.data = self.base / "data"
        self.sock = self.base / "sock"
        self.logfile = self.base / "postgres.log"
        self.port = 0
        self.running = False

    # -- running commands as the server's user -------------------------------------------------

    def _run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        kw: dict = {}
        if os.geteuid() == 0 and self.user.uid != 0:
            kw = dict(user=self.user.uid, group=self.user.gid, extra_groups=[])
        env = {"PATH": f"{self.bindir}:/usr/bin:/bin", "LC_ALL": "C", "HOME": str(self.base), "TZ": "UTC"}
        proc = subprocess.run([str(self.bindir / args[0]), *args[1:]], cwd=self.base, env=env, capture_output=True,
                              text=True, timeout=timeout, **kw)
        if proc.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}\n{self.log_tail()}")
        return proc

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- lifecycle -----------------------------------------------------------------------------

    def init(self) -> None:
        """initdb and the configuration (loopback only, trust, fsync on). Once per directory."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.sock.mkdir(exist_ok=True)
        for p in (self.base, self.sock):
            os.chown(p, self.user.uid, self.user.gid)
        os.chmod(self.base, 0o700)
        os.chmod(self.sock, 0o700)
        self._run("initdb", "-D", str(self.data), "-U", self.user.name, "--auth=trust", "--encoding=UTF8",
                  "--locale=C", "--no-instructions", timeout=120)
        self.port = free_port()
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(
                "\n# oncelog tests\n"
                "listen_addresses = '127.0.0.1'\n"
                f"port = {self.port}\n"
                f"unix_socket_directories = '{self.sock}'\n"
                "fsync = on\n"
                "synchronous_commit = on\n"
                "full_page_writes = on\n"
                "max_connections = 100\n"
                "shared_buffers = 32MB\n"
                "log_min_messages = warning\n"
            )
        (self.data / "pg_hba.conf").write_text(
            "# loopback only, trust (tests)\n"
            "local all all trust\n"
            "host  all all 127.0.0.1/32 trust\n"
        )

    def start(self) -> "PgServer":
        """Start the server (initdb first if needed); returns once it accepts connections."""
        if not (self.data / "PG_VERSION").exists():
            self.init()
        self._run("pg_ctl", "start", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", str(START_TIMEOUT_S),
                  timeout=START_TIMEOUT_S + 10)
        self.running = True
        self._wait_ready(START_TIMEOUT_S)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        for _ in range(int(timeout_s / 0.05) + 1):
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=5):
                    return
            except psycopg.OperationalError as exc:
                last = exc
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        raise RuntimeError(f"PostgreSQL on port {self.port} not ready after {timeout_s}s: {last}\n{self.log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode`` (smart, fast or immediate: immediate is a crash)."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"unknown shutdown mode {mode!r}")
        if not self.running:
            return
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w", "-t", str(STOP_TIMEOUT_S),
                  timeout=STOP_TIMEOUT_S + 10)
        self.running = False

    def restart(self, mode: str = "fast") -> None:
        """Stop with ``mode`` and start again on the same data directory and port."""
        self.stop(mode)
        self.start()

    def close(self) -> None:
        """Stop (immediately) and remove the directory."""
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    # -- databases -----------------------------------------------------------------------------

    def dsn(self, db: str) -> str:
        return f"postgresql://{self.user.name}@127.0.0.1:{self.port}/{db}"

    def create_database(self, name: str) -> str:
        """CREATE DATABASE ``name``; returns its DSN."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn("postgres"), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn("postgres"), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def __enter__(self) -> "PgServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
