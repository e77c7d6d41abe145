"""One local SparkSession (local[2]) for the whole test session, with the ``oncelog`` format
registered. Starting Spark costs 6-20 s here, so every Spark test shares it; each test uses its
own broker (the ``broker`` fixture), topics and checkpoint directories.

Spark needs Java and PySpark; in CI a missing one is an error, never a skip.
"""

from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator:
    # Workers must run this venv's interpreter (the one with oncelog and confluent-kafka), and
    # Spark must listen on loopback only.
    from oncelog.spark.session import loopback_session

    session = loopback_session(
        "local[2]", "oncelog-tests", conf={"spark.sql.streaming.forceDeleteTempCheckpointLocation": "true"})
    yield session
    session.stop()
