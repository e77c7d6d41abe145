"""User documentation describes the system as it is: no page cites the issue that brought a
feature. How the system got here (issue numbers, before/after figures) lives in the History
section, docs/history/.

``STILL_TO_REWRITE`` names the pages not yet rewritten that way; each is emptied from the list as
it is rewritten, and the second test fails when a page on the list no longer needs to be there.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"

#: "issue 18", "issues 6 and 13", "(issue #29)", "issue-13": a citation of one of our issues.
#: Upstream trackers are named by their own keys (KAFKA-17754, SPARK-25005, librdkafka #5511).
CITATION = re.compile(r"\bissues?[\s-]+#?\d+", re.IGNORECASE)

#: Pages of the History section: where issue numbers belong.
HISTORY = DOCS / "history"
#: Not user documentation (excluded from the site in mkdocs.yml).
NOT_PAGES = {DOCS / "upstream"}

#: Pages still written issue by issue, to be rewritten as the system is (their history moved to
#: docs/history/). Empty this list; do not add to it.
STILL_TO_REWRITE: set[str] = set()


def _user_pages() -> list[Path]:
    pages = [ROOT / "README.md"]
    for page in sorted(DOCS.rglob("*.md")):
        if page.is_relative_to(HISTORY) or any(page.is_relative_to(d) for d in NOT_PAGES):
            continue
        pages.append(page)
    return pages


def _citations(page: Path) -> list[str]:
    found = []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        for match in CITATION.finditer(line):
            found.append(f"{page.relative_to(ROOT)}:{number}: {match.group(0)!r}  {line.strip()[:120]}")
    return found


def test_no_user_page_cites_an_issue_number() -> None:
    offenders = []
    for page in _user_pages():
        if page.parent == DOCS and page.name in STILL_TO_REWRITE:
            continue
        offenders += _citations(page)
    assert not offenders, (
        "user docs describe the system as it is; move history to docs/history/:\n" + "\n".join(offenders[:40]))


def test_the_list_of_pages_still_to_rewrite_is_current() -> None:
    for name in STILL_TO_REWRITE:
        page = DOCS / name
        assert page.is_file(), f"{name} is gone: take it off STILL_TO_REWRITE"
        assert _citations(page), f"{name} cites no issue any more: take it off STILL_TO_REWRITE"


def test_the_pattern_finds_what_it_should() -> None:
    for cited in ("before issue 13", "Security (issue 18)", "issues 6 and 13", "(issue #29)", "Issue 7's targets",
                  "issue-13 fix"):
        assert CITATION.search(cited), cited
    for fine in ("KAFKA-17754", "SPARK-25005", "librdkafka #5511", "R22", "KIP-848", "tissue 3", "the issues"):
        assert not CITATION.search(fine), fine
