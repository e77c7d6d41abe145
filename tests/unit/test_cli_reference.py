"""docs/reference/cli.md is the rendering of the Typer app (``oncelog.cli.app``): regenerate with
``python -m oncelog_tools.cli_reference > docs/reference/cli.md``."""

from __future__ import annotations

from pathlib import Path

from oncelog_tools import cli_reference

DOC = Path(__file__).parents[2] / "docs" / "reference" / "cli.md"


def test_the_page_equals_the_commands() -> None:
    assert DOC.read_text() == cli_reference.render(), (
        "docs/reference/cli.md is stale: python -m oncelog_tools.cli_reference > docs/reference/cli.md")


def test_every_command_has_a_section() -> None:
    text = cli_reference.render()
    for command in ("oncelog broker", "oncelog topics create", "oncelog transactions find-hanging",
                    "oncelog users add", "oncelog acls add", "oncelog verify copy", "oncelog groups reset-offsets"):
        assert f"`{command}`" in text, command
