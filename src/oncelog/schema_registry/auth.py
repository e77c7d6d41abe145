"""Who may do what on the registry.

Authentication. With an authorizer configured (``authorizer.class.name``), every request must
carry HTTP Basic credentials of one of the broker's SCRAM users (``oncelog users add`` /
AlterUserScramCredentials): the password is checked against the stored SCRAM credential as
SASL/PLAIN checks it; a success is remembered for ``CACHE_S`` (the key is a hash of the
password, never the password). Without, 401 with error code 40101. Without an authorizer
there is no login and everything is allowed (as the broker's own listeners without ACLs).

Authorization: Kafka ACLs, through the mapping of Confluent's Topic ACL Authorizer (its
security plugin's ``SimpleTopicAclAuthorizer``): a subject is authorized by the ACLs of its
topic, ``<topic>-key`` and ``<topic>-value`` by ``<topic>`` (TopicNameStrategy); any other
subject (record-name strategies, Protobuf imports) by the topic resource of the subject's own
name (a PREFIXED topic ACL can cover them).

    SUBJECT_READ, SUBJECT_COMPATIBILITY_READ          TOPIC READ
    SUBJECT_WRITE, SUBJECT_DELETE,
    SUBJECT_COMPATIBILITY_WRITE                       TOPIC WRITE
    SCHEMA_READ (GET /schemas/ids/{id}…)              TOPIC READ of one subject the id is under
    GLOBAL_COMPATIBILITY_READ (GET /config, /mode)    CLUSTER DESCRIBE_CONFIGS
    GLOBAL_COMPATIBILITY_WRITE (PUT /config, /mode)   CLUSTER ALTER_CONFIGS
    GLOBAL_READ (GET /subjects)                       the subjects listed are the readable ones

(Confluent requires a super user for the global operations; the cluster operations here are
what a super user always passes, and what Kafka's own config APIs ask.) A refusal is 403 with
error code 40301.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import threading
import time
from typing import Any, Callable

from oncelog.acl.model import CLUSTER_NAME, AclOperation, ResourceType
from oncelog.schema_registry import errors

CACHE_S = 60.0
CACHE_MAX = 1024
MAX_CREDENTIAL_BYTES = 1024

_READ = {"SUBJECT_READ", "SUBJECT_COMPATIBILITY_READ", "SCHEMA_READ"}
_WRITE = {"SUBJECT_WRITE", "SUBJECT_DELETE", "SUBJECT_COMPATIBILITY_WRITE"}


def topic_of(subject: str) -> str:
    """The topic whose ACLs authorize ``subject`` (TopicNameStrategy, else the subject)."""
    for suffix in ("-key", "-value"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[:-len(suffix)]
    return subject


class AllowAll:
    """The guard without an authorizer."""

    principal = "User:ANONYMOUS"

    def may(self, operation: str, subject: str | None) -> bool:
        return True

    def require(self, operation: str, subject: str | None) -> None:
        return None

    def refuse(self, operation: str, what: str) -> None:
        raise errors.forbidden(self.principal, operation, what)


class Guard(AllowAll):
    """The checks of one request by ``principal`` from ``host``."""

    def __init__(self, authorizer: Any, principal: str, host: str) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host

    def may(self, operation: str, subject: str | None) -> bool:
        az = self.authorizer
        if operation in _READ or operation in _WRITE:
            op = AclOperation.READ if operation in _READ else AclOperation.WRITE
            return bool(az.authorize(self.principal, self.host, op, ResourceType.TOPIC, topic_of(subject or "")))
        op = AclOperation.DESCRIBE_CONFIGS if operation.endswith("_READ") else AclOperation.ALTER_CONFIGS
        return bool(az.authorize(self.principal, self.host, op, ResourceType.CLUSTER, CLUSTER_NAME))

    def require(self, operation: str, subject: str | None) -> None:
        if not self.may(operation, subject):
            self.refuse(operation, f"subject {subject}" if subject is not None else "the registry")


class Authenticator:
    """HTTP Basic against the broker's SCRAM credentials. ``store``: returns the broker's
    ``CredentialStore`` (read at each check: changes apply at once)."""

    def __init__(self, store: Callable[[], Any], clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._ok: dict[tuple[str, bytes], float] = {}
        self._lock = threading.Lock()

    def principal(self, header: str | None) -> str:
        """``User:<name>`` of the request's ``Authorization`` header. Raises 40101."""
        from oncelog.broker.auth.credentials import derive, salted_password

        if not header or len(header) > MAX_CREDENTIAL_BYTES or not header[:6].lower() == "basic ":
            raise errors.unauthorized()
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise errors.unauthorized() from None
        if not sep or not user or not password:
            raise errors.unauthorized()
        key = (user, hashlib.sha256(password.encode()).digest())
        now = self._clock()
        creds = self._store().any_of(user)
        with self._lock:
            if self._ok.get(key, 0.0) > now and creds:
                return f"User:{user}"
        if not creds:
            raise errors.unauthorized()
        cred = creds[0]
        salted = salted_password(cred.mechanism, password, cred.salt, cred.iterations)
        if not hmac.compare_digest(derive(cred.mechanism, cred.salt, salted, cred.iterations).stored_key,
                                   cred.stored_key):
            raise errors.unauthorized()
        with self._lock:
            if len(self._ok) >= CACHE_MAX:
                self._ok = {k: t for k, t in self._ok.items() if t > now}
                if len(self._ok) >= CACHE_MAX:
                    self._ok.clear()
            self._ok[key] = now + CACHE_S
        return f"User:{user}"
