"""The object-store client of diskless topics (issue 29): four asynchronous calls on one S3 bucket
and prefix, retried with backoff under a deadline, failing with typed Kafka errors.

Theory of operation. ``ObjectStore`` offers what the diskless engine needs and nothing more:

- ``put_if_absent(key, data)`` — a conditional create (``If-None-Match: *``): True when this call
  created the object, False when an object was already there (written by someone else). After
  an attempt whose outcome is unknown (a timeout, a dropped connection) a retry that finds the
  object compares its ETag with the MD5 of ``data`` (S3's ETag of a single-part upload) and
  answers True when it is our own upload (where the ETag is not the MD5 — SSE-KMS — the answer
  is False, the safe side: the engine uploads again under a new key);
- ``get_range(key, start, end)`` — bytes ``[start, end)``, exactly ``end - start`` of them;
- ``delete(keys)`` — idempotent (an absent key is not an error);
- ``list(prefix)`` — an async iterator of ``ObjectInfo`` (key, size, last modified), for the
  orphan collector; a listing that fails part-way restarts after the last key it yielded.

Keys are relative to the configured prefix (``diskless.storage.url=s3://BUCKET/PREFIX``).

Retries. Each call has an overall deadline (``call_deadline_s``); each attempt is bounded by
``request_timeout_s`` and by what is left of the deadline. Transient failures — a timeout, a
refused or reset connection, HTTP 5xx (503 SlowDown included), 408 and 429 — are retried after
a delay drawn with "full jitter" (uniform in ``[0, min(backoff_max, backoff_initial * 2**n)]``,
``RetryPolicy``); anything else (bad credentials, 4xx, a missing object) fails at once. When the
deadline passes, the call fails with ``ObjectStoreTimeout`` (REQUEST_TIMED_OUT) if its last
attempt timed out, otherwise ``ObjectStoreUnavailable`` (KAFKA_STORAGE_ERROR); both are
retriable Kafka errors, so a producer told either retries. Permanent failures are
``ObjectStoreFailed``, a missing object (or bucket) ``ObjectNotFound`` and an object that ends
before the range asked for ``ObjectTruncated`` (all KAFKA_STORAGE_ERROR here: the read cache
turns the last two into damage, CORRUPT_MESSAGE, diskless/cache.py). Every call
raises only these (and ``ValueError`` for a bad key or range, a caller's bug). The clock,
the sleep and the random source are injected, so the policy is unit-tested without waiting.

The library is obstore (Rust's object_store; bench/object_store.py and docs/DISKLESS.md say why),
an optional dependency (extra ``diskless``) imported only when a store is opened, so the embedded
broker never needs it. Its own retries are turned off: this module owns the policy. The raw calls
go through a small ``Backend`` protocol (``ObstoreBackend`` is the real one) that classifies the
library's exceptions into ``Transient`` / ``AlreadyExists`` / ``NotFound`` / permanent.

Thread-safety: an ``ObjectStore`` is used from one event loop; its calls may run concurrently.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import AsyncIterator, Awaitable, Callable, Mapping, Protocol, Sequence
from urllib.parse import urlparse

from oncelog.protocol.errors import InvalidConfig, KafkaStorageError, RequestTimedOut

__all__ = [
    "AlreadyExists", "Backend", "BeyondEnd", "NotFound", "ObjectInfo", "ObjectNotFound", "ObjectStore",
    "ObjectStoreConfig", "ObjectStoreFailed", "ObjectStoreTimeout", "ObjectStoreUnavailable", "ObjectTruncated",
    "ObstoreBackend", "RetryPolicy", "Transient",
]


# -- the errors the broker sees ------------------------------------------------------------------

class ObjectStoreUnavailable(KafkaStorageError):
    """The store kept failing transiently (refused, reset, 5xx) until the call's deadline."""


class ObjectStoreTimeout(RequestTimedOut):
    """The call's deadline passed and its last attempt had timed out."""


class ObjectStoreFailed(KafkaStorageError):
    """A failure retrying cannot cure: credentials, permissions, a bad request."""


class ObjectNotFound(KafkaStorageError):
    """The object asked for is not in the store."""


class ObjectTruncated(ObjectStoreFailed):
    """The object ends before the end of the range asked for (a short answer, or HTTP 416):
    ``available`` holds the bytes it still has from the range's start (maybe none)."""

    def __init__(self, message: str, available: bytes = b"") -> None:
        super().__init__(message)
        self.available = available


# -- what a backend raises -----------------------------------------------------------------------

class Transient(Exception):
    """An attempt failed in a way a retry may cure. ``timeout``: it timed out (outcome unknown).
    ``not_acted``: the store surely did not act on it (a 503 answer, a refused connection); by
    default the outcome is unknown (a reset, a 500: the write may have happened)."""

    def __init__(self, message: str, *, timeout: bool = False, not_acted: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout
        self.not_acted = not_acted


class AlreadyExists(Exception):
    """A conditional create found the key taken."""


class NotFound(Exception):
    """No object under the key."""


class BeyondEnd(Exception):
    """A ranged GET starts at or after the object's end (HTTP 416)."""


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: ``key`` relative to the store's prefix."""

    key: str
    size: int
    last_modified: datetime | None
    etag: str | None = None


class Backend(Protocol):
    """The raw calls, one attempt each, keys already prefixed. Raise ``Transient``,
    ``AlreadyExists``, ``NotFound``, ``BeyondEnd`` (a range past the object's end) or anything
    else (permanent)."""

    async def put_if_absent(self, key: str, data: bytes) -> None: ...
    async def etag(self, key: str) -> str | None: ...
    async def get_range(self, key: str, start: int, end: int) -> bytes: ...
    async def delete(self, keys: Sequence[str]) -> None: ...
    async def list_page(self, prefix: str, after: str | None) -> tuple[list[ObjectInfo], bool]:
        """One page of objects whose key starts with ``prefix``, after ``after``; True when more follow."""
        ...


# -- configuration -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ObjectStoreConfig:
    """Where the objects live and how patiently they are fetched.

    ``from_properties`` reads the broker properties of the contract (issue 29):
    ``diskless.storage.url=s3://BUCKET/PREFIX``, ``diskless.storage.endpoint=http://HOST:PORT``
    (absent: the provider's default), credentials from ``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY`` (absent: the library's default chain), and the tuning properties
    ``diskless.storage.region``, ``diskless.storage.request.timeout.ms``,
    ``diskless.storage.call.deadline.ms``, ``diskless.storage.retry.backoff.ms`` and
    ``diskless.storage.retry.backoff.max.ms``.
    """

    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = None
    request_timeout_s: float = 10.0
    connect_timeout_s: float = 2.0
    call_deadline_s: float = 30.0
    backoff_initial_s: float = 0.05
    backoff_max_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.bucket:
            raise InvalidConfig("diskless.storage.url: no bucket (expected s3://BUCKET/PREFIX)")
        for name in ("request_timeout_s", "connect_timeout_s", "call_deadline_s", "backoff_initial_s",
                     "backoff_max_s"):
            if not getattr(self, name) > 0:
                raise InvalidConfig(f"object store {name} must be > 0, got {getattr(self, name)}")
        if self.backoff_max_s < self.backoff_initial_s:
            raise InvalidConfig(f"diskless.storage.retry.backoff.max.ms ({self.backoff_max_s * 1000:g}) is below "
                                f"diskless.storage.retry.backoff.ms ({self.backoff_initial_s * 1000:g})")

    @classmethod
    def from_properties(cls, props: Mapping[str, str], environ: Mapping[str, str] | None = None) -> "ObjectStoreConfig":
        env = os.environ if environ is None else environ
        url = props.get("diskless.storage.url")
        if not url:
            raise InvalidConfig("diskless.storage.url is not set (expected s3://BUCKET/PREFIX)")
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc or parsed.query or parsed.fragment:
            raise InvalidConfig(f"diskless.storage.url={url!r}: expected s3://BUCKET/PREFIX")
        endpoint = props.get("diskless.storage.endpoint") or None
        if endpoint is not None:
            ep = urlparse(endpoint)
            if ep.scheme not in ("http", "https") or not ep.hostname:
                raise InvalidConfig(f"diskless.storage.endpoint={endpoint!r}: expected http(s)://HOST:PORT")

        def ms(name: str, default_s: float) -> float:
            raw = props.get(name)
            if raw is None:
                return default_s
            try:
                value = int(raw)
            except ValueError:
                raise InvalidConfig(f"{name}={raw!r}: expected a whole number of milliseconds") from None
            if value <= 0:
                raise InvalidConfig(f"{name}={raw!r}: must be > 0")
            return value / 1000.0

        return cls(
            bucket=parsed.netloc, prefix=parsed.path.strip("/"), endpoint=endpoint,
            region=props.get("diskless.storage.region") or env.get("AWS_REGION") or "us-east-1",
            access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            request_timeout_s=ms("diskless.storage.request.timeout.ms", 10.0),
            call_deadline_s=ms("diskless.storage.call.deadline.ms", 30.0),
            backoff_initial_s=ms("diskless.storage.retry.backoff.ms", 0.05),
            backoff_max_s=ms("diskless.storage.retry.backoff.max.ms", 2.0),
        )


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: before retry ``n`` (0-based) wait uniform
    ``[0, min(max_s, initial_s * 2**n)]``."""

    initial_s: float
    max_s: float

    def delay(self, retry: int, rng: random.Random) -> float:
        cap = min(self.max_s, self.initial_s * (2.0 ** min(retry, 62)))
        return rng.uniform(0.0, cap)


# -- the client ----------------------------------------------------------------------------------

@dataclass
class _Attempts:
    """What one call went through (for its error message and the tests)."""

    count: int = 0
    last: Exception | None = None
    outcome_unknown: bool = False


class ObjectStore:
    """The diskless engine's view of one bucket and prefix (see the module docstring)."""

    def __init__(self, config: ObjectStoreConfig, backend: Backend | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.backend = backend if backend is not None else ObstoreBackend(config)
        self.policy = RetryPolicy(config.backoff_initial_s, config.backoff_max_s)
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._prefix = f"{config.prefix}/" if config.prefix else ""
        #: attempts retried over the store's life (observability, tests)
        self.retries = 0
        #: requests sent over the store's life, by kind (PUT, GET, HEAD, DELETE, LIST): every
        #: attempt, retries included, as a cloud store bills them (metrics, bench)
        self.requests: dict[str, int] = {}
        #: bytes uploaded by successful PUTs and downloaded by successful GETs
        self.put_bytes = 0
        self.get_bytes = 0

    def _key(self, key: str) -> str:
        if not key or key.startswith("/") or "//" in key:
            raise ValueError(f"object key {key!r}: expected a non-empty relative path")
        return self._prefix + key

    async def _call(self, what: str, attempt: Callable[[float], Awaitable], attempts: _Attempts | None = None):
        """Run ``attempt(timeout)`` until it succeeds, fails permanently or the deadline passes."""
        a = attempts or _Attempts()
        deadline = self._clock() + self.config.call_deadline_s
        while True:
            left = deadline - self._clock()
            if left <= 0:
                raise self._exhausted(what, a)
            a.count += 1
            kind = what.split(" ", 1)[0]
            self.requests[kind] = self.requests.get(kind, 0) + 1
            try:
                return await asyncio.wait_for(attempt(left), min(self.config.request_timeout_s, left))
            except (AlreadyExists, NotFound, BeyondEnd):
                raise
            except (Transient, asyncio.TimeoutError, TimeoutError, ConnectionError) as exc:
                timed_out = isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or (
                    isinstance(exc, Transient) and exc.timeout)
                if timed_out and not isinstance(exc, Transient):
                    exc = Transient(f"no answer within {min(self.config.request_timeout_s, left):.3g} s", timeout=True)
                a.last = exc
                # unless the store surely did not act (refused connection, 503), a completed
                # request may hide behind the failure. Decided from the classified failure, never
                # from its text: obstore's text carries the URL and the attempt's duration, where
                # "503" may be a port, a key or "1.503ms" (issue 29, found through the fault proxy)
                not_acted = (isinstance(exc, Transient) and exc.not_acted) or isinstance(exc, ConnectionRefusedError)
                a.outcome_unknown = a.outcome_unknown or not not_acted
            except Exception as exc:  # noqa: BLE001 - the backend's permanent failures
                raise ObjectStoreFailed(f"object store {what}: {exc}") from exc
            pause = self.policy.delay(a.count - 1, self._rng)
            if self._clock() + pause >= deadline:
                raise self._exhausted(what, a)
            self.retries += 1
            await self._sleep(pause)

    def _exhausted(self, what: str, a: _Attempts) -> Exception:
        msg = (f"object store {what}: gave up after {a.count} attempt(s) in "
               f"{self.config.call_deadline_s:g} s; last: {a.last}")
        if isinstance(a.last, Transient) and a.last.timeout:
            return ObjectStoreTimeout(msg)
        return ObjectStoreUnavailable(msg)

    # -- the four calls ------------------------------------------------------------------------

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` holding ``data`` unless it exists: True if this call created it."""
        full = self._key(key)
        a = _Attempts()

        async def attempt(_left: float) -> None:
            await self.backend.put_if_absent(full, data)

        try:
            await self._call(f"PUT {full}", attempt, a)
            self.put_bytes += len(data)
            return True
        except NotFound as exc:  # the bucket itself is missing
            raise ObjectStoreFailed(f"PUT {full}: {exc}") from None
        except AlreadyExists:
            if a.count > 1 and a.outcome_unknown:
                # an earlier attempt may have created it: ours if the content is ours
                try:
                    tag = await self._call(f"HEAD {full}", lambda _left: self.backend.etag(full))
                except NotFound:
                    return False
                return tag is not None and tag.strip('"') == hashlib.md5(data, usedforsecurity=False).hexdigest()
            return False

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``key``. ``ObjectNotFound`` when absent (or its bucket is);
        ``ObjectTruncated`` (with the bytes it has) when it ends before ``end``."""
        if not 0 <= start < end:
            raise ValueError(f"byte range [{start}, {end}) of {key!r}: expected 0 <= start < end")
        full = self._key(key)
        try:
            data = await self._call(f"GET {full} [{start}, {end})",
                                    lambda _left: self.backend.get_range(full, start, end))
        except AlreadyExists as exc:  # not an answer a GET can have
            raise ObjectStoreFailed(f"GET {full}: {exc}") from None
        except NotFound:
            raise ObjectNotFound(f"object {full} not found") from None
        except BeyondEnd:
            raise ObjectTruncated(f"object {full} ends before byte {start} (GET [{start}, {end}): 416)") from None
        if len(data) < end - start:
            raise ObjectTruncated(f"object {full} ends at byte {start + len(data)}, before {end} (GET [{start}, {end}): "
                                  f"{len(data)} bytes returned, {end - start} expected)", bytes(data))
        if len(data) != end - start:
            raise ObjectStoreFailed(f"GET {full} [{start}, {end}): {len(data)} bytes returned, "
                                    f"{end - start} expected")
        self.get_bytes += len(data)
        return data

    async def delete(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` (absent ones included, without error)."""
        if not keys:
            return
        full = [self._key(k) for k in keys]
        try:
            await self._call(f"DELETE {len(full)} object(s)", lambda _left: self.backend.delete(full))
        except NotFound:
            return
        except AlreadyExists as exc:  # not an answer a DELETE can have
            raise ObjectStoreFailed(f"DELETE: {exc}") from None

    async def list(self, prefix: str = "", start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """Every object under ``prefix`` (relative to the store's), in key order, page by page;
        only the keys after ``start_after`` (relative too) when given."""
        base = self._prefix + prefix
        after: str | None = None if start_after is None else self._prefix + start_after
        while True:
            try:
                page, more = await self._call(f"LIST {base}", lambda _left: self.backend.list_page(base, after))
            except (NotFound, AlreadyExists) as exc:  # the bucket itself is missing
                raise ObjectStoreFailed(f"LIST {base}: {exc}") from None
            for info in page:
                after = info.key
                yield ObjectInfo(info.key[len(self._prefix):], info.size, info.last_modified, info.etag)
            if not more or not page:
                return


# -- the real backend: obstore -------------------------------------------------------------------

#: statuses a retry may cure
_RETRY_STATUS = ("status code: 5", "status code: 408", "status code: 429", "SlowDown")
_STATUS = re.compile(r"status code: (\d{3})\b")
_TRANSIENT_TEXT = ("error sending request", "connection", "timed out", "timeout", "reset", "broken pipe",
                   "incomplete", "eof", "body error", "dns error")


@dataclass
class ObstoreBackend:
    """``Backend`` on obstore's ``S3Store`` (its own retries off; timeouts from the config)."""

    config: ObjectStoreConfig
    list_chunk: int = 1000
    _store: object = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            import obstore  # noqa: F401 - the optional extra
            from obstore.store import S3Store
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise InvalidConfig("diskless topics need the object-store client: pip install 'oncelog[diskless]' "
                                f"({exc})") from exc
        c = self.config
        kwargs: dict = {"region": c.region}
        if c.endpoint:
            kwargs["endpoint"] = c.endpoint
        if c.access_key_id and c.secret_access_key:
            kwargs.update(access_key_id=c.access_key_id, secret_access_key=c.secret_access_key)
        self._store = S3Store(
            c.bucket, **kwargs,
            client_options={"allow_http": bool(c.endpoint and c.endpoint.startswith("http://")),
                            "timeout": f"{int(c.request_timeout_s * 1000)}ms",
                            "connect_timeout": f"{int(c.connect_timeout_s * 1000)}ms"},
            retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=c.request_timeout_s),
                          "backoff": {"init_backoff": timedelta(milliseconds=10), "max_backoff": timedelta(seconds=1),
                                      "base": 2.0}},
        )

    @staticmethod
    def _classify(exc: Exception) -> Exception:
        from obstore import exceptions as ox

        # obstore raises some of its errors as the builtin ones (FileNotFoundError for a GET of
        # an absent key): test those before the OSError catch-all below
        if isinstance(exc, (ox.AlreadyExistsError, ox.PreconditionError, FileExistsError)):
            return AlreadyExists(str(exc))
        if isinstance(exc, (ox.NotFoundError, FileNotFoundError)):
            return NotFound(str(exc))
        if isinstance(exc, (ox.PermissionDeniedError, ox.UnauthenticatedError, ox.InvalidPathError,
                            ox.NotSupportedError, ox.UnknownConfigurationKeyError, PermissionError)):
            return exc
        text = str(exc).split("\n\nDebug source:")[0]
        low = text.lower()
        status = _STATUS.search(text)
        if any(s in text for s in _RETRY_STATUS):
            # a 503 (SlowDown) is S3's "not done, slow down"; a 500 or another 5xx may come
            # after the write happened
            return Transient(text[:500], not_acted=status is not None and status.group(1) == "503")
        if status is not None and status.group(1) == "416":  # Range Not Satisfiable: the object is shorter
            return BeyondEnd(text[:500])
        if "status code: 4" in low:  # 4xx other than 408/429: the request itself is wrong
            return exc
        if any(s in low for s in _TRANSIENT_TEXT) or isinstance(exc, (ox.GenericError, ox.JoinError, OSError)):
            # the connection was refused (the library names it in its debug source): nothing sent
            refused = isinstance(exc, ConnectionRefusedError) or "connection refused" in str(exc).lower()
            return Transient(text[:500], timeout="timed out" in low or "timeout" in low, not_acted=refused)
        return exc

    async def _run(self, coro: Awaitable):
        try:
            return await coro
        except Exception as exc:  # noqa: BLE001 - classified below
            raise self._classify(exc) from exc

    async def put_if_absent(self, key: str, data: bytes) -> None:
        import obstore

        await self._run(obstore.put_async(self._store, key, data, mode="create"))

    async def etag(self, key: str) -> str | None:
        import obstore

        meta = await self._run(obstore.head_async(self._store, key))
        return meta.get("e_tag")

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        import obstore

        return bytes(await self._run(obstore.get_range_async(self._store, key, start=start, end=end)))

    async def delete(self, keys: Sequence[str]) -> None:
        import obstore

        await self._run(obstore.delete_async(self._store, list(keys)))

    async def list_page(self, prefix: str, after: str | None) -> tuple[list[ObjectInfo], bool]:
        import obstore

        # obstore lists by path segments: list the directory part, filter on the full prefix
        folder = prefix.rsplit("/", 1)[0] if "/" in prefix else None
        for _ in range(1_000_000):  # bounded: each turn moves ``after`` forward through the bucket
            stream = obstore.list(self._store, folder, offset=after, chunk_size=self.list_chunk)
            try:
                chunk = await self._run(stream.__anext__())
            except StopAsyncIteration:
                return [], False
            items = [ObjectInfo(m["path"], m["size"], m.get("last_modified"), m.get("e_tag"))
                     for m in chunk if m["path"].startswith(prefix)]
            more = len(chunk) >= self.list_chunk
            if items or not more:
                return items, more
            after = chunk[-1]["path"]  # a full page of keys outside ``prefix``: go on after it
        raise ObjectStoreFailed(f"LIST {prefix}: no end in sight")
