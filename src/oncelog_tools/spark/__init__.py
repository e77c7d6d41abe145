"""Spark helpers for oncelog's own jobs (demo, tests, benchmarks): not the connector."""
