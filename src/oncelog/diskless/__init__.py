"""Diskless topics (issue 29, docs/DISKLESS.md): record batches in an S3-compatible object store,
their order and coordinates in the cluster's PostgreSQL store.

This package is the engine's input/output shell: it may use asyncio (the object-store calls are
asynchronous), which storage/ and cluster/ may not (tests/unit/test_layers.py). It may import
protocol/, storage/ and cluster/; nothing below it imports it, and the embedded broker never does
(its client library is the optional `diskless` extra, imported lazily).
"""
