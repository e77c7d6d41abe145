"""The worked example of docs/TESTING-WITH-ONCELOG.md runs as written (issue 19): the code block
after ``<!-- example-file: test_uppercase.py -->`` is written out as a user's test file and run
by pytest with the plugin, so the page cannot drift from what works."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DOC = Path(__file__).resolve().parents[2] / "docs" / "TESTING-WITH-ONCELOG.md"
BLOCK = re.compile(r"<!-- example-file: (?P<name>[\w.]+) -->\s*```python\n(?P<code>.*?)\n```", re.S)


def test_docs_example_passes(pytester: pytest.Pytester) -> None:
    blocks = {m["name"]: m["code"] for m in BLOCK.finditer(DOC.read_text())}
    assert "test_uppercase.py" in blocks, f"no example-file block in {DOC}"
    pytester.makepyfile(**{name.removesuffix(".py"): code for name, code in blocks.items()})
    result = pytester.runpytest("-p", "no:oncelog", "-p", "oncelog.testing.plugin", "-p", "no:cacheprovider",
                                "--timeout", "240")
    result.assert_outcomes(passed=1)
