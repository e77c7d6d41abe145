"""``oncelog broker``'s two parsers of one option list (``cli_broker.OPTIONS``): the fast one
``python -m oncelog broker`` uses (``fast_parse``, no Typer) must give ``run_broker`` exactly the
arguments the Typer command gives it, and must give up on what only Typer reports properly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oncelog import cli, cli_broker

VALID = [
    ["--data-dir", "/d"],
    ["--data-dir=/d", "--listen", "127.0.0.1:0"],
    ["--data-dir", "/d", "-o", "a=1", "--override", "b = 2", "-oc=3"],
    ["--data-dir", "/d", "--config", "/etc/s.properties", "--advertised-host", "h", "--node-id", "7",
     "--store", "postgresql://u@h:5432/db", "--log-level", "debug"],
]
INVALID = [
    [],                                    # --data-dir missing
    ["--data-dir", "/d", "--help"],
    ["--data-dir", "/d", "--bogus"],
    ["--data-dir", "/d", "--node-id", "x"],
    ["--data-dir", "/d", "-o", "no-equals"],  # run_broker's own BadParameter, under Typer
    ["--data-dir", "/d", "extra"],
    ["--data", "/d"],                      # no abbreviations (Click has none)
]


def _typer_kwargs(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    seen: dict[str, object] = {}
    monkeypatch.setattr(cli_broker, "run_broker", lambda **kw: seen.update(kw))
    result = CliRunner().invoke(cli.app, ["broker", *argv])
    assert result.exit_code == 0, result.output
    return seen


@pytest.mark.parametrize("argv", VALID)
def test_fast_parse_gives_what_typer_gives(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fast = cli_broker.fast_parse(argv)
    assert fast is not None
    assert fast == _typer_kwargs(argv, monkeypatch)


@pytest.mark.parametrize("argv", INVALID)
def test_fast_parse_leaves_errors_and_help_to_typer(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli_broker.fast_parse(argv) is None
    monkeypatch.setattr(cli_broker, "run_broker", lambda **kw: None)
    if "--help" not in argv and "no-equals" not in argv:  # Click's usage errors
        assert CliRunner().invoke(cli.app, ["broker", *argv]).exit_code == 2


def test_broker_process_imports_neither_typer_nor_pydantic(tmp_path: Path) -> None:
    """What a broker process has imported by its ready line (the point of the fast path)."""
    code = (
        "import sys, oncelog.cli_broker as c\n"
        "kw = c.fast_parse(['--data-dir', sys.argv[1]])\n"
        "import oncelog.broker.broker\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'pydantic', 'rich', 'click'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
