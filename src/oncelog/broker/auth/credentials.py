"""SCRAM credentials (issue 18): what the broker keeps to check a password it never stores.

For each user and mechanism (SCRAM-SHA-256, SCRAM-SHA-512) a ``ScramCredential`` holds the
salt, the iteration count, the stored key and the server key of RFC 5802, exactly what Kafka
keeps (``kafka-configs --describe`` shows the iterations only). The password is not kept, nor the
salted password: AlterUserScramCredentials (51) carries the salted password, from which the two
keys are derived here and the salted password dropped.

``CredentialStore`` is the pure core: validate and apply alterations and describe users with
Kafka's per-user error codes (RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL,
UNSUPPORTED_SASL_MECHANISM). ``CredentialFile`` keeps it durably in the data directory
(``scram-credentials.json``, replaced atomically: a crash leaves the old content or the new), so
``oncelog users add --data-dir`` can write the first credential before any broker runs, as
``kafka-storage format --add-scram`` does.

Single-threaded: the broker's event loop (or the CLI).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from oncelog.protocol.errors import ErrorCode, InvalidConfig
from oncelog.atomic import write_atomically

__all__ = ["FILE_NAME", "MECHANISMS", "MECHANISM_IDS", "CredentialFile", "CredentialStore", "ScramCredential", "UserCredentials",
           "derive", "salted_password"]

FILE_NAME = "scram-credentials.json"
#: Kafka's ScramMechanism ids on the wire (AlterUserScramCredentials / Describe...)
MECHANISMS: dict[int, str] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_IDS: dict[str, int] = {v: k for k, v in MECHANISMS.items()}
_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's bounds on the iteration count (ScramMechanism.minIterations / maxIterations)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: the SCRAM library refuses shorter salts (Kafka's clients send 32 random bytes, as the CLI does)
MIN_SALT_BYTES = 12


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict[str, object]:
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return {"salt": b64(self.salt), "stored_key": b64(self.stored_key), "server_key": b64(self.server_key),
                "iterations": self.iterations}

    @classmethod
    def from_json(cls, mechanism: str, doc: dict[str, object]) -> "ScramCredential":
        d = lambda k: base64.b64decode(str(doc[k]))  # noqa: E731
        return cls(mechanism, d("salt"), d("stored_key"), d("server_key"), int(doc["iterations"]))  # type: ignore[call-overload]


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 Hi(password, salt, i): PBKDF2-HMAC with the mechanism's hash (what a Kafka
    admin client sends in AlterUserScramCredentials)."""
    return hashlib.pbkdf2_hmac(_HASH[mechanism], password.encode(), salt, iterations)


def derive(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The stored key H(HMAC(salted, "Client Key")) and server key HMAC(salted, "Server Key")."""
    h = _HASH[mechanism]
    client_key = hmac.new(salted, b"Client Key", h).digest()
    return ScramCredential(mechanism, salt, hashlib.new(h, client_key).digest(),
                           hmac.new(salted, b"Server Key", h).digest(), iterations)


class CredentialStore:
    """user -> mechanism -> credential, with Kafka's validation. Pure (no I/O)."""

    def __init__(self, creds: dict[str, dict[str, ScramCredential]] | None = None) -> None:
        self.creds: dict[str, dict[str, ScramCredential]] = creds or {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.creds.get(user, {}).get(mechanism)

    def any_of(self, user: str) -> list[ScramCredential]:
        """Every credential of ``user``, strongest first (PLAIN checks against the first)."""
        have = self.creds.get(user, {})
        return [have[m] for m in ("SCRAM-SHA-512", "SCRAM-SHA-256") if m in have]

    def users(self) -> list[str]:
        return sorted(self.creds)

    def describe(self, users: Iterable[str] | None) -> list[tuple[str, ErrorCode, str | None, list[tuple[int, int]]]]:
        """DescribeUserScramCredentials: per user (every user with a credential when ``users`` is
        None) its error, message and (mechanism id, iterations) list."""
        if users is None:
            return [(u, ErrorCode.none, None, self._infos(u)) for u in self.users()]
        names = list(users)
        out = []
        for u in names:
            if names.count(u) > 1:
                out.append((u, ErrorCode.duplicate_resource, f"user {u!r} is named more than once", []))
            elif u not in self.creds:
                out.append((u, ErrorCode.resource_not_found, f"attempt to describe a user credential that does not exist: {u}", []))
            else:
                out.append((u, ErrorCode.none, None, self._infos(u)))
        return out

    def _infos(self, user: str) -> list[tuple[int, int]]:
        return [(MECHANISM_IDS[m], c.iterations) for m, c in sorted(self.creds[user].items())]

    def alter(self, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]
              ) -> dict[str, tuple[ErrorCode, str | None]]:
        """AlterUserScramCredentials: deletions (user, mechanism id) and upsertions (user,
        mechanism id, iterations, salt, salted password), applied per user all or nothing.
        Returns user -> (error, message). A user named in two operations for the same mechanism
        gets DUPLICATE_RESOURCE, as in Kafka."""
        errors: dict[str, tuple[ErrorCode, str | None]] = {}
        seen: dict[tuple[str, int], int] = {}
        for user, mech, *_ in [*deletions, *upsertions]:
            seen[(user, mech)] = seen.get((user, mech), 0) + 1
        for (user, mech), n in seen.items():
            if n > 1:
                errors[user] = (ErrorCode.duplicate_resource, f"a user credential cannot be altered twice in the same request: {user}")
        for user, mech in deletions:
            if user in errors:
                continue
            err = self._check_user_mech(user, mech)
            if err is None and MECHANISMS[mech] not in self.creds.get(user, {}):
                err = (ErrorCode.resource_not_found, f"attempt to delete a user credential that does not exist: {user}")
            if err:
                errors[user] = err
        for user, mech, iterations, salt, salted in upsertions:
            if user in errors:
                continue
            err = self._check_user_mech(user, mech)
            if err is None and not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
                err = (ErrorCode.unacceptable_credential,
                       f"iterations {iterations} out of range {MIN_ITERATIONS}..{MAX_ITERATIONS} for {MECHANISMS[mech]}")
            if err is None and (len(salt) < MIN_SALT_BYTES or not salted):
                err = (ErrorCode.unacceptable_credential,
                       f"the salt must be at least {MIN_SALT_BYTES} bytes and the salted password not empty")
            if err:
                errors[user] = err
        for user, mech in deletions:
            if user not in errors:
                self.creds[user].pop(MECHANISMS[mech], None)
                if not self.creds[user]:
                    del self.creds[user]
        for user, mech, iterations, salt, salted in upsertions:
            if user not in errors:
                m = MECHANISMS[mech]
                self.creds.setdefault(user, {})[m] = derive(m, salt, salted, iterations)
        return {u: errors.get(u, (ErrorCode.none, None)) for u, *_ in [*deletions, *upsertions]}

    @staticmethod
    def _check_user_mech(user: str, mech: int) -> tuple[ErrorCode, str] | None:
        if not user:
            return ErrorCode.unacceptable_credential, "username must not be empty"
        if mech not in MECHANISMS:
            return ErrorCode.unsupported_sasl_mechanism, f"unknown SCRAM mechanism id {mech}"
        return None

    def to_json(self) -> bytes:
        doc = {"version": 1, "users": {u: {m: c.to_json() for m, c in sorted(ms.items())}
                                       for u, ms in sorted(self.creds.items())}}
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "CredentialStore":
        doc = json.loads(data)
        return cls({u: {m: ScramCredential.from_json(m, c) for m, c in ms.items()} for u, ms in doc["users"].items()})


class CredentialFile:
    """The store kept in ``<data-dir>/scram-credentials.json``. ``save()`` replaces the file
    atomically (write, fsync, rename, fsync the directory). The file holds salts and derived
    keys, never a password; it is created readable by its owner only."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME

    def load(self) -> CredentialStore:
        """The file's credentials (none when it does not exist). Raises InvalidConfig when it
        cannot be read: the broker refuses to start rather than run without its users."""
        try:
            return CredentialStore.from_json(self.path.read_bytes())
        except FileNotFoundError:
            return CredentialStore()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidConfig(f"{self.path}: cannot read the SCRAM credentials: {exc!r}") from None

    def save(self, store: CredentialStore) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, store.to_json())
        self.path.chmod(0o600)


class UserCredentials:
    """The broker's credentials: the store, kept durably in ``file`` after every alteration.
    SASL sessions read ``store`` at each exchange, so a change applies to the next login."""

    def __init__(self, file: CredentialFile) -> None:
        self.file = file
        self.store = file.load()

    async def apply(self, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]
                    ) -> dict[str, tuple[ErrorCode, str | None]]:
        """AlterUserScramCredentials: ``alter`` (the cluster store's class has the same method)."""
        return self.alter(deletions, upsertions)

    async def refresh(self) -> None:
        """Nothing to reload: this broker is the only writer of its file."""

    def close(self) -> None:
        """Nothing to close: the file is written whole at each change."""

    def alter(self, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]
              ) -> dict[str, tuple[ErrorCode, str | None]]:
        """``CredentialStore.alter`` on a copy, saved, then made current (a failed save leaves
        the old credentials in force and raises OSError)."""
        scratch = CredentialStore({u: dict(ms) for u, ms in self.store.creds.items()})
        results = scratch.alter(deletions, upsertions)
        if any(code == ErrorCode.none for code, _ in results.values()):
            self.file.save(scratch)
            self.store = scratch
        return results
