"""docs/COMPATIBILITY.md is the rendering of the routing tables (issue 16): every Kafka API
0..92 listed, with oncelog's advertised versions; regenerate with
``python -m oncelog.broker.configuration.compatibility > docs/COMPATIBILITY.md``."""

from __future__ import annotations

from pathlib import Path

from oncelog.broker.configuration import compatibility
from oncelog.protocol import apis


def test_every_api_has_a_line() -> None:
    assert sorted(compatibility.NOTES) == list(range(compatibility.LAST_KEY + 1))
    for key in apis.SUPPORTED_VERSIONS:
        assert not compatibility.NOTES[key].startswith("not served"), key


def test_the_document_equals_the_tables() -> None:
    doc = Path(__file__).parents[2] / "docs" / "COMPATIBILITY.md"
    assert doc.read_text() == compatibility.render(), (
        "docs/COMPATIBILITY.md is stale: python -m oncelog.broker.configuration.compatibility > docs/COMPATIBILITY.md")


def test_no_note_denies_the_security_oncelog_serves() -> None:
    """Issue 26: the delegation-token lines still said "oncelog has no authentication or
    authorizer (PLAINTEXT listener only)" after SASL (17, 36) and ACLs (29-31) were served."""
    served = set(apis.SUPPORTED_VERSIONS)
    assert {apis.SASL_HANDSHAKE, apis.SASL_AUTHENTICATE, apis.CREATE_ACLS} <= served
    for key, note in compatibility.NOTES.items():
        assert "no authentication" not in note and "PLAINTEXT listener only" not in note, (key, note)
        assert "(all: no authorizer)" not in note, (key, note)
