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


def emit_json(obj: Any) -> None:
    """Print ``obj`` as indented, key-sorted JSON (the ``--json`` output of every verb)."""
    import json

    import typer

    typer.echo(json.dumps(obj, indent=2, sort_keys=True))


def fail(message: str, as_json: bool = False, code: int = 1) -> None:
    """Report ``message`` (as ``{"error": …}`` with ``--json``, else in red) and exit ``code``."""
    import typer

    if as_json:
        emit_json({"error": message})
    else:
        from rich.markup import escape

        console.print(f"[red]{escape(message)}[/red]", highlight=False)  # a message's own [..] stays text
    raise typer.Exit(code)
