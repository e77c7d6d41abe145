"""The tests' PostgreSQL server: ``oncelog.testing.pgserver`` (the product's testing API needs it for
``oncelog.testing.Cluster``; the tools use it too; see that module)."""

from oncelog.testing.pgserver import DEDICATED_USER, PgServer, PostgresMissing, find_bindir, free_port, server_user

__all__ = ["DEDICATED_USER", "PgServer", "PostgresMissing", "find_bindir", "free_port", "server_user"]
