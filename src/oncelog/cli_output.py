"""rich's console and tables for the command line, imported at first use.

``oncelog broker`` prints nothing through rich unless its configuration is refused, so a broker
process does not pay for importing rich at start (issue 19: a test's broker starts per test).
``console`` behaves as a ``rich.console.Console`` and ``Table(...)`` returns a ``rich.table.Table``.
"""

from __future__ import annotations

from typing import Any


class _Console:
    """A ``rich.console.Console`` made at the first attribute access."""

    _console: Any = None

    def __getattr__(self, name: str) -> Any:
        if _Console._console is None:
            from rich.console import Console

            _Console._console = Console()
        return getattr(_Console._console, name)


console: Any = _Console()


def Table(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands for the class
    from rich.table import Table as RichTable

    return RichTable(*args, **kwargs)
