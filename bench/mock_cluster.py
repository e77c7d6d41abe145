"""librdkafka's in-memory mock cluster, served to external clients (a bench peer, issue 7).

Run as a child process: ``python -m bench.mock_cluster``. It loads the librdkafka that
confluent-kafka bundles (``confluent_kafka.libs/librdkafka-*.so``) through ctypes, creates a
producer handle (the mock cluster needs a handle to own its threads), creates a one-broker mock
cluster on it, prints ``BOOTSTRAP <host:port>`` on stdout and then stays alive until its stdin
closes or it receives SIGTERM. Topics are created on demand with
``TOPIC <name> <partitions>`` lines on stdin, each answered with ``OK <name>``.

The mock listens on 127.0.0.1 (librdkafka binds its mock brokers to the loopback address) and
keeps only the last 5 MiB / 100,000 message sets of each partition: benchmarks against it must
read data back soon after writing it.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys


def _load() -> ctypes.CDLL:
    import confluent_kafka

    libs = os.path.join(os.path.dirname(os.path.dirname(confluent_kafka.__file__)), "confluent_kafka.libs")
    found = sorted(glob.glob(os.path.join(libs, "librdkafka*.so*")))
    if not found:
        raise SystemExit(f"no bundled librdkafka under {libs}")
    lib = ctypes.CDLL(found[0])
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    return lib


def main() -> int:
    lib = _load()
    err = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    # No bootstrap.servers: the handle connects nowhere, it only owns the mock cluster.
    rk = lib.rd_kafka_new(0, conf, err, len(err))  # RD_KAFKA_PRODUCER
    if not rk:
        raise SystemExit(f"rd_kafka_new: {err.value.decode()}")
    mcluster = lib.rd_kafka_mock_cluster_new(rk, 1)
    if not mcluster:
        raise SystemExit("rd_kafka_mock_cluster_new failed")
    print("BOOTSTRAP", lib.rd_kafka_mock_cluster_bootstraps(mcluster).decode(), flush=True)
    for line in sys.stdin:  # ends when the parent closes our stdin (or dies)
        parts = line.split()
        if len(parts) == 3 and parts[0] == "TOPIC":
            rc = lib.rd_kafka_mock_topic_create(mcluster, parts[1].encode(), int(parts[2]), 1)
            print(("OK " if rc == 0 else f"ERR {rc} ") + parts[1], flush=True)
    os._exit(0)  # no orderly librdkafka teardown needed: the process owns nothing else


if __name__ == "__main__":
    sys.exit(main())
