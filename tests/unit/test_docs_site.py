"""The documentation site (mkdocs.yml over docs/) builds strictly and offline.

`make docs` runs the same build into build/site/. Strict mode turns every warning into a failure:
a link to a page or file that does not exist, a link to a heading a page does not have, a page
that no nav entry reaches, a nav entry without its page. The second test checks that those
really fail a build, on a small site made with the same settings.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]


def _mkdocs_build(config: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(site_dir)],
        capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    result = _mkdocs_build(ROOT / "mkdocs.yml", site_dir)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"`make docs` would fail:\n{output}"
    assert "WARNING" not in output, output
    return site_dir


def test_the_site_builds_strictly(site: Path) -> None:
    for page in ("index.html", "getting-started.html", "concepts/exactly-once.html",
                 "reference/cli.html", "COMPATIBILITY-configs.html", "history/index.html"):
        assert (site / page).is_file(), page


_EXTERNAL = re.compile(
    r"""<(?:script|img|iframe|source)\b[^>]*\bsrc=["']?(?:https?:)?//"""
    r"""|<link\b[^>]*\bhref=["']?(?:https?:)?//""", re.IGNORECASE)


def test_the_site_loads_nothing_from_elsewhere(site: Path) -> None:
    """No web fonts, no CDN: every script, stylesheet, font and image comes from the site itself.
    (Links a reader may follow are fine; nothing is fetched when a page opens.)"""
    offenders = []
    for page in site.rglob("*.html"):
        for match in _EXTERNAL.finditer(page.read_text(errors="replace")):
            offenders.append(f"{page.relative_to(site)}: {match.group(0)}")
    assert not offenders, offenders[:10]


def test_broken_links_and_pages_outside_the_nav_fail_the_build(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(
        "# Home\n\n[a page that exists](other.md), [one that does not](missing.md),\n"
        "[a heading that does not exist](other.md#no-such-heading).\n")
    (docs / "other.md").write_text("# Other\n\n## A heading\n\n[back](index.md#home)\n")
    (docs / "orphan.md").write_text("# Orphan\n")
    config.update(docs_dir=str(docs), nav=[{"Home": "index.md"}, {"Other": "other.md"}])
    config.pop("exclude_docs", None)
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))

    result = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "'missing.md'" in output, output
    assert "#no-such-heading" in output, output
    assert "orphan.md" in output, output
    assert "other.md#a-heading" not in output and "index.md#home" not in output, output
