"""One local SparkSession (local[2]) for the whole test session, with the ``oncelog`` format
registered. Starting Spark costs 6-20 s here, so every Spark test shares it; each test uses its
own broker (the ``broker`` fixture), topics and checkpoint directories.

Spark needs Java and PySpark; in CI a missing one is an error, never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def spark_faults(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file that arms the sink's test faults (``oncelog.spark.faults``) in the shared
    session: set in the environment before Spark starts, so its workers see it too."""
    from oncelog.spark import faults

    path = tmp_path_factory.mktemp("spark-faults") / "armed"
    os.environ[faults.ENV] = str(path)
    return path


@pytest.fixture(scope="session")
def spark(spark_faults: Path) -> Iterator:
    # Workers must run this venv's interpreter (the one with oncelog and confluent-kafka), and
    # Spark must listen on loopback only.
    from oncelog_tools.spark.session import loopback_session

    session = loopback_session(
        "local[2]", "oncelog-tests", conf={"spark.sql.streaming.forceDeleteTempCheckpointLocation": "true"})
    yield session
    session.stop()
