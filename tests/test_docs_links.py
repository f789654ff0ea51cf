"""Every relative link in the README, CONTRIBUTING.md, CHANGELOG.md, docs/*.md and the spaCy project's
README points at a file that exists, and a ``#anchor`` at a heading of the page it names (GitHub's
heading slugs)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md", REPO / "project" / "README.md"] + DOCS
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    text = re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> Set[str]:
    found: Set[str] = set()
    text = re.sub(r"^```.*?^```[ \t]*$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M):
        base, n = slug(heading), 0
        name = base
        while name in found:  # a repeated heading gets -1, -2, ...
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def links(page: Path) -> List[Tuple[str, str]]:
    return [(page.relative_to(REPO).as_posix(), target) for target in _LINK.findall(prose(page.read_text(encoding="utf-8")))]


def test_slugs_follow_github():
    assert slug("Configuration of the `elmo` component") == "configuration-of-the-elmo-component"
    assert slug("The bf16 candidate (stage 4, shipped)") == "the-bf16-candidate-stage-4-shipped"
    assert slug("Measured: a tagger and an NER model with and without ELMo") == \
        "measured-a-tagger-and-an-ner-model-with-and-without-elmo"
    assert slug("Threads and GPU") == "threads-and-gpu"


def test_link_checker_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) `[code](not-a-link.md)`\n", encoding="utf-8")
    assert _LINK.findall(prose(page.read_text(encoding="utf-8"))) == ["#title", "missing.md"]
    assert anchors(page) == {"title"}


ALL_LINKS = [(name, target) for page in PAGES for name, target in links(page)
             if not re.match(r"[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto: are not checked


def test_the_pages_link_to_each_other():
    assert len(PAGES) >= 10 and len(ALL_LINKS) >= 40, (len(PAGES), len(ALL_LINKS))
    assert any(name == "project/README.md" for name, _ in ALL_LINKS), "the project's README is checked too"
    readme_targets = {target.split("#")[0] for name, target in ALL_LINKS if name == "README.md"}
    unlinked = [page.relative_to(REPO).as_posix() for page in DOCS + [REPO / "project" / "README.md"]
                if page.relative_to(REPO).as_posix() not in readme_targets]
    assert not unlinked, f"docs pages the README does not link to: {unlinked}"


@pytest.mark.parametrize("name, target", ALL_LINKS, ids=[f"{name}->{target}" for name, target in ALL_LINKS])
def test_relative_link_resolves(name, target):
    path, _, anchor = target.partition("#")
    page = REPO / name
    file = (page.parent / path).resolve() if path else page
    assert file.exists(), f"{name}: the link {target!r} points at {path!r}, which does not exist"
    if anchor and file.suffix == ".md":
        assert anchor in anchors(file), f"{name}: the link {target!r}: {file.name} has no heading #{anchor}"
