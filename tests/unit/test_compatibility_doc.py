"""docs/COMPATIBILITY.md is the rendering of the routing tables (issue 16): every Kafka API
0..92 listed, with oncelog's advertised versions; regenerate with
``python -m oncelog.broker.compatibility > docs/COMPATIBILITY.md``."""

from __future__ import annotations

from pathlib import Path

from oncelog.broker import compatibility
from oncelog.protocol import apis


def test_every_api_has_a_line() -> None:
    assert sorted(compatibility.NOTES) == list(range(compatibility.LAST_KEY + 1))
    for key in apis.SUPPORTED_VERSIONS:
        assert not compatibility.NOTES[key].startswith("not served"), key


def test_the_document_equals_the_tables() -> None:
    doc = Path(__file__).parents[2] / "docs" / "COMPATIBILITY.md"
    assert doc.read_text() == compatibility.render(), (
        "docs/COMPATIBILITY.md is stale: python -m oncelog.broker.compatibility > docs/COMPATIBILITY.md")
