"""The tests' PostgreSQL server: ``oncelog_tools.pgserver`` (moved there so that tools can start
one too; see that module)."""

from oncelog_tools.pgserver import DEDICATED_USER, PgServer, PostgresMissing, find_bindir, free_port, server_user

__all__ = ["DEDICATED_USER", "PgServer", "PostgresMissing", "find_bindir", "free_port", "server_user"]
