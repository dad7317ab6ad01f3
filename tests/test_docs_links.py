"""The README and docs/ stay navigable: every relative link resolves to a file of the repository and
every ``#anchor`` to a heading of its target (GitHub's anchor rule: lower case, punctuation other
than ``-`` and ``_`` dropped, spaces to ``-``), and the README stays a front page (<= 300 lines)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "DESIGN.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading's text (``## Quick start`` -> ``quick-start``)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Anchors of every ``#``-heading of a Markdown file, skipping fenced code blocks."""
    out, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6} (.+)", line)):
            out.add(github_anchor(m.group(1)))
    return out


def links(path: Path) -> list[str]:
    """Relative link targets of a Markdown file outside fenced code (``http(s)``/``mailto`` skipped)."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out += [t for t in LINK_RE.findall(line) if not t.startswith(("http://", "https://", "mailto:"))]
    return out


def test_github_anchor_rule():
    assert github_anchor("Bake-off as a service (`POST /v1/bakeoff`, `/bakeoff`)") == "bake-off-as-a-service-post-v1bakeoff-bakeoff"
    assert github_anchor("Quick start") == "quick-start"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "index.md":
            assert f"docs/{page.name}" in readme, f"README's Read next does not list docs/{page.name}"
