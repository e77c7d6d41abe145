"""Fixtures of the cluster-mode tests (issue 15): a 'broker' on a fresh database."""

from __future__ import annotations

from typing import Iterator

import pytest

from cluster_store import Store


@pytest.fixture
def store(pg_dsn) -> Iterator[Store]:
    s = Store(pg_dsn)
    yield s
    s.close()
