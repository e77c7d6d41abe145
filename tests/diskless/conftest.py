"""Fixtures of the diskless-topic tests (issue 29): a real SeaweedFS S3 server on loopback
(tests/seaweedfs.py) and object-store configurations on it. A machine without the ``weed``
binary fails these tests, never skips them."""

from __future__ import annotations

import itertools
import os
from typing import Iterator

import pytest

import seaweedfs

_prefixes = itertools.count(1)


def _server() -> "seaweedfs.SeaweedServer":
    try:
        return seaweedfs.SeaweedServer()
    except seaweedfs.SeaweedMissing as exc:
        pytest.fail(str(exc), pytrace=False)


def _running() -> Iterator["seaweedfs.SeaweedServer"]:
    """A started SeaweedFS server, closed afterwards whatever happened."""
    server = _server()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def seaweed() -> Iterator["seaweedfs.SeaweedServer"]:
    """One SeaweedFS server for the module's tests (do not kill it: use ``own_seaweed``)."""
    yield from _running()


@pytest.fixture
def own_seaweed() -> Iterator["seaweedfs.SeaweedServer"]:
    """A SeaweedFS server of the test's own, which it may kill and restart."""
    yield from _running()


def _store_config(server: "seaweedfs.SeaweedServer", *, endpoint: str | None = None, tuning: dict | None = None):
    """An ObjectStoreConfig on ``server``'s bucket under a fresh prefix, built as a broker
    builds it: from the contract's properties and the AWS_* environment variables."""
    from oncelog.diskless.object_store import ObjectStoreConfig

    props = {"diskless.storage.url": f"s3://{server.bucket}/t{os.getpid()}-{next(_prefixes)}",
             "diskless.storage.endpoint": endpoint or server.endpoint}
    props.update({k: str(v) for k, v in (tuning or {}).items()})
    return ObjectStoreConfig.from_properties(props, environ=server.env())


@pytest.fixture
def make_config():
    """``make_config(server, endpoint=None, tuning={"diskless.storage.…": value})``: see ``_store_config``."""
    def make(server, *, endpoint=None, tuning=None):
        return _store_config(server, endpoint=endpoint, tuning=tuning)
    return make
