"""The tests' S3-compatible server: ``oncelog.testing.seaweedfs`` (``make cluster`` starts one
too, oncelog_tools/cluster.py; see that module)."""

from oncelog.testing.seaweedfs import (ACCESS_KEY, BUCKET, REGION, SECRET_KEY, START_TIMEOUT_S, SeaweedMissing,
                                       SeaweedServer, find_weed)

__all__ = ["ACCESS_KEY", "BUCKET", "REGION", "SECRET_KEY", "START_TIMEOUT_S", "SeaweedMissing", "SeaweedServer",
           "find_weed"]
