"""``oncelog users add|remove|list`` (issue 18): SCRAM credentials, in the words of
``kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[iterations=N,password=P]'`` and
``kafka-storage format --add-scram``.

Two places to write to:

* ``--data-dir DIR``: the credential file of the broker of that data dir
  (``<DIR>/scram-credentials.json``, broker/auth/credentials.py), written directly. This is how
  the first user is made before any broker runs; a broker reads the file when it starts, so use
  it on a stopped broker (a running one does not see the change and overwrites it on its next
  alteration).
* ``--bootstrap-server HOST:PORT``: AlterUserScramCredentials / DescribeUserScramCredentials to
  a running broker, over any listener: ``--command-config FILE`` gives the client properties
  (``security.protocol``, ``sasl.*``, ``ssl.*``) as with ``kafka-configs.sh`` (the salt is made
  and the password salted here; only the salted password travels, as with Kafka's admin client).

* ``--store postgresql://…``: the cluster store's table (cluster mode), written directly, at any
  time: every broker of the cluster re-reads it about every second.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer
from oncelog.cli_output import Table, console, emit_json, fail

from oncelog.broker.auth.credentials import (
    MECHANISM_IDS, MECHANISMS, MIN_ITERATIONS, CredentialFile, salted_password,
)
from oncelog.client import ProtocolClient, read_command_config
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

app = typer.Typer(no_args_is_help=True, help="Add, remove and list SCRAM users (kafka-configs --entity-type users).")
JSON = typer.Option(False, "--json", help="print JSON (for scripts) instead of a table")
DATA_DIR = typer.Option(None, "--data-dir", help="write the credential file of this broker data dir (broker stopped)")
BOOTSTRAP = typer.Option(None, "--bootstrap-server", "-b", help="HOST:PORT of a running broker")
COMMAND_CONFIG = typer.Option(None, "--command-config", help="client properties for --bootstrap-server "
                              "(security.protocol, sasl.*, ssl.*), as kafka-configs.sh takes them")
STORE = typer.Option(None, "--store", help="cluster mode: postgresql://USER@HOST:PORT/DB of the cluster store")


_emit = emit_json
_fail = fail


def _target(data_dir: Optional[Path], bootstrap: Optional[str], store: Optional[str], as_json: bool) -> None:
    given = [x for x in (data_dir, bootstrap, store) if x is not None]
    if len(given) != 1:
        _fail("give exactly one of --data-dir, --bootstrap-server, --store", as_json, 2)
    if store is not None and not store.startswith(("postgresql://", "postgres://")):
        _fail(f"--store {store!r}: expected postgresql://USER@HOST:PORT/DB", as_json, 2)
    if store is not None:
        from oncelog.cluster import missing_driver

        missing = missing_driver()
        if missing is not None:
            _fail(missing, as_json, 2)


def _store_conn(store: str):  # type: ignore[no-untyped-def]
    """A connection to the cluster store, its schema made if need be (a store no broker used yet)."""
    from oncelog.broker.membership.cluster_member import connector
    from oncelog.cluster.schema import ensure_schema

    conn = connector(store)()
    ensure_schema(conn)
    return conn


def _connect(bootstrap: str, security: dict[str, str] | None) -> ProtocolClient:
    """A connection to the broker, logged in as ``security`` says; a refusal ends the command
    with its reason (exit 1)."""
    try:
        return ProtocolClient(bootstrap, security=security)
    except (PermissionError, OSError) as exc:  # ssl.SSLError is an OSError
        _fail(f"cannot connect to {bootstrap}: {exc}")
        raise  # unreachable: _fail raises


def _mechanism(name: str, as_json: bool) -> int:
    mech = MECHANISM_IDS.get(name.upper())
    if mech is None:
        _fail(f"--mechanism {name}: expected one of {', '.join(MECHANISM_IDS)}", as_json, 2)
    return mech  # type: ignore[return-value]


def _alter(data_dir: Optional[Path], bootstrap: Optional[str], store: Optional[str], deletions: list[tuple[str, int]],
           upsertions: list[tuple[str, int, int, bytes, bytes]], security: dict[str, str] | None = None,
           ) -> dict[str, tuple[int, str | None]]:
    if store is not None:
        from oncelog.broker.membership import cluster_credentials

        with _store_conn(store) as conn:
            return {u: (int(c), m) for u, (c, m) in cluster_credentials.alter(conn, deletions, upsertions).items()}
    if data_dir is not None:
        from oncelog.broker.auth.credentials import UserCredentials

        return {u: (int(c), m) for u, (c, m) in UserCredentials(CredentialFile(data_dir)).alter(deletions, upsertions).items()}
    assert bootstrap is not None
    with _connect(bootstrap, security) as c:
        m = c.classes(apis.ALTER_USER_SCRAM_CREDENTIALS, 0)
        req = m["AlterUserScramCredentialsRequest"](
            deletions=tuple(m["ScramCredentialDeletion"](name=u, mechanism=mech) for u, mech in deletions),
            upsertions=tuple(m["ScramCredentialUpsertion"](name=u, mechanism=mech, iterations=it, salt=salt,
                                                           salted_password=sp) for u, mech, it, salt, sp in upsertions))
        res = c.request(apis.ALTER_USER_SCRAM_CREDENTIALS, req, version=0)
    return {r.user: (int(r.error_code), r.error_message) for r in res.results}


@app.command("add")
def add(
    name: str,
    password: str = typer.Option(..., "--password", help="the user's password (it is salted and hashed here)"),
    mechanism: str = typer.Option("SCRAM-SHA-256", "--mechanism", help="SCRAM-SHA-256 or SCRAM-SHA-512"),
    iterations: int = typer.Option(MIN_ITERATIONS, "--iterations", help="PBKDF2 iterations (4096..16384)"),
    data_dir: Optional[Path] = DATA_DIR, bootstrap: Optional[str] = BOOTSTRAP, store: Optional[str] = STORE,
    command_config: Optional[str] = COMMAND_CONFIG, as_json: bool = JSON,
) -> None:
    """Add a user, or replace its credential for this mechanism. The same credential serves PLAIN."""
    _target(data_dir, bootstrap, store, as_json)
    mech = _mechanism(mechanism, as_json)
    salt = os.urandom(32)
    salted = salted_password(MECHANISMS[mech], password, salt, iterations)
    code, message = _alter(data_dir, bootstrap, store, [], [(name, mech, iterations, salt, salted)],
                           read_command_config(command_config))[name]
    if code:
        _fail(f"cannot add {name}: {ErrorCode(code).name.upper()} {message or ''}", as_json)
    if as_json:
        _emit({"user": name, "mechanism": MECHANISMS[mech], "iterations": iterations})
    else:
        console.print(f"user [bold]{name}[/bold]: {MECHANISMS[mech]} credential set ({iterations} iterations)")


@app.command("remove")
def remove(
    name: str,
    mechanism: str = typer.Option("SCRAM-SHA-256", "--mechanism", help="SCRAM-SHA-256 or SCRAM-SHA-512"),
    data_dir: Optional[Path] = DATA_DIR, bootstrap: Optional[str] = BOOTSTRAP, store: Optional[str] = STORE,
    command_config: Optional[str] = COMMAND_CONFIG, as_json: bool = JSON,
) -> None:
    """Delete a user's credential for one mechanism."""
    _target(data_dir, bootstrap, store, as_json)
    mech = _mechanism(mechanism, as_json)
    code, message = _alter(data_dir, bootstrap, store, [(name, mech)], [], read_command_config(command_config))[name]
    if code:
        _fail(f"cannot remove {name}: {ErrorCode(code).name.upper()} {message or ''}", as_json)
    if as_json:
        _emit({"user": name, "removed": MECHANISMS[mech]})
    else:
        console.print(f"user [bold]{name}[/bold]: {MECHANISMS[mech]} credential removed")


@app.command("list")
def list_(
    data_dir: Optional[Path] = DATA_DIR, bootstrap: Optional[str] = BOOTSTRAP, store: Optional[str] = STORE,
    command_config: Optional[str] = COMMAND_CONFIG, as_json: bool = JSON,
) -> None:
    """Every user with a SCRAM credential: its mechanisms and iteration counts (never a key)."""
    _target(data_dir, bootstrap, store, as_json)
    rows: list[tuple[str, list[tuple[int, int]]]]
    if store is not None:
        from oncelog.broker.membership import cluster_credentials

        with _store_conn(store) as conn:
            rows = [(u, infos) for u, _, _, infos in cluster_credentials.load(conn).describe(None)]
    elif data_dir is not None:
        rows = [(u, infos) for u, _, _, infos in CredentialFile(data_dir).load().describe(None)]
    else:
        assert bootstrap is not None
        with _connect(bootstrap, read_command_config(command_config)) as c:
            m = c.classes(apis.DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
            res = c.request(apis.DESCRIBE_USER_SCRAM_CREDENTIALS, m["DescribeUserScramCredentialsRequest"](users=None),
                            version=0)
        if res.error_code:
            _fail(f"cannot list users: {ErrorCode(res.error_code).name.upper()} {res.error_message or ''}", as_json)
        rows = [(r.user, [(int(i.mechanism), int(i.iterations)) for i in r.credential_infos]) for r in res.results]
    if as_json:
        _emit({"users": [{"user": u, "credentials": [{"mechanism": MECHANISMS.get(mech, str(mech)), "iterations": it}
                                                      for mech, it in infos]} for u, infos in rows]})
        return
    t = Table()
    for col in ("user", "mechanism", "iterations"):
        t.add_column(col)
    for u, infos in rows:
        for mech, it in infos:
            t.add_row(u, MECHANISMS.get(mech, str(mech)), str(it))
    console.print(t)
