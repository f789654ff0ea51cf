"""One truth per figure: a measured number quoted by the README, ``docs/`` or the project's README
carries a figure id, ``<!-- fig: ID -->`` right after it, and ``bench/results/figures.json`` holds
that id once, with its value, what was measured, the model, the machine, the threads, the command
that made it, and the results file it comes from.

Checked here: every marked id is in the registry; one id never shows two values (on one page or
across pages); each shown value is the registry's to the decimals shown (``754`` for 753.6,
``84.3`` for 84.343); each registry value is its results file's (a JSON value reached by a pointer,
``file.json#/key/0/key``, times ``scale`` when the file stores a fraction; or, for a markdown or
text source, the value as written appears in it); every registry entry names its conditions and
is quoted somewhere (no stale entries). The convention is in CONTRIBUTING.md ("Figures").
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, NamedTuple

import pytest

REPO = Path(__file__).resolve().parent.parent
REGISTRY = REPO / "bench" / "results" / "figures.json"
PAGES = [REPO / "README.md", REPO / "project" / "README.md"] + sorted((REPO / "docs").glob("*.md"))
FIELDS = ("value", "what", "model", "machine", "threads", "command", "source")

MARKER = re.compile(r"<!--\s*fig:\s*([A-Za-z0-9_.:=/+-]+)\s*-->")
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")


class Quote(NamedTuple):
    """A marked figure on a page: where, its id, and the number as written."""

    page: str
    line: int
    fig_id: str
    shown: str


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def quotes(text: str, page: str = "page") -> List[Quote]:
    """Every ``<!-- fig: ID -->`` marker in ``text`` with the number written just before it.

    The number is the last one between the previous marker (or table cell border, or the line's
    start) and this marker, so ``**84.3**% <!-- fig: x -->`` and ``| 3,229 <!-- fig: y --> |`` both
    read; a marker with no number before it is an error.
    """
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        start = 0
        for match in MARKER.finditer(line):
            before = line[start : match.start()]
            before = re.split(r"\|", before)[-1]
            numbers = NUMBER.findall(before)
            if not numbers:
                raise ValueError(f"{page}:{number}: the marker for {match.group(1)!r} follows no number")
            found.append(Quote(page, number, match.group(1), numbers[-1]))
            start = match.end()
    return found


def agrees(shown: str, value: float) -> bool:
    """Whether ``shown`` is ``value`` rounded to the decimals it shows."""
    return abs(_number(shown) - value) <= 0.5 * 10.0 ** -_decimals(shown) + 1e-9


def consistent(a: str, b: str) -> bool:
    """Whether two written forms can be the same figure (one may be a rounding of the other)."""
    coarse = min(_decimals(a), _decimals(b))
    return abs(_number(a) - _number(b)) <= 0.5 * 10.0**-coarse + 1e-9


def conflicts(found: List[Quote]) -> List[str]:
    """One line per id that is written with two values that cannot be the same figure."""
    by_id: Dict[str, List[Quote]] = {}
    for quote in found:
        by_id.setdefault(quote.fig_id, []).append(quote)
    lines = []
    for fig_id, group in sorted(by_id.items()):
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                if not consistent(a.shown, b.shown):
                    lines.append(f"{fig_id}: {a.shown} ({a.page}:{a.line}) vs {b.shown} ({b.page}:{b.line})")
    return lines


def source_value(source: str, scale: float = 1.0) -> Any:
    """The value a registry entry's ``source`` points at: a number (JSON pointer) or a text to search."""
    path, _, pointer = source.partition("#")
    file = REPO / path
    if not pointer:
        return file.read_text(encoding="utf-8")
    node: Any = json.loads(file.read_text(encoding="utf-8"))
    for part in pointer.strip("/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node * scale if isinstance(node, (int, float)) else node


def _all_quotes() -> List[Quote]:
    return [q for page in PAGES for q in quotes(page.read_text(encoding="utf-8"), page.relative_to(REPO).as_posix())]


def _registry() -> Dict[str, Dict[str, Any]]:
    return json.loads(REGISTRY.read_text(encoding="utf-8"))


# --- the checker itself --------------------------------------------------------------------------


def test_a_marked_figure_is_read_with_its_number():
    text = "| small | 3,229 <!-- fig: a --> | 18.7 ms <!-- fig: b --> |\nthe gain **84.3**% <!-- fig: c --> (3 seeds)\n"
    assert [(q.fig_id, q.shown, q.line) for q in quotes(text)] == [("a", "3,229", 1), ("b", "18.7", 1), ("c", "84.3", 2)]
    with pytest.raises(ValueError, match="follows no number"):
        quotes("| x | <!-- fig: a --> |")


def test_two_values_for_one_figure_are_caught():
    pages = quotes("README: 754 <!-- fig: small -->\n", "README.md") + quotes("1,979 <!-- fig: small -->\n", "docs/x.md")
    assert conflicts(pages) == ["small: 754 (README.md:1) vs 1,979 (docs/x.md:1)"]
    rounded = quotes("84.34 <!-- fig: pos --> and 84.3 <!-- fig: pos --> and 84 <!-- fig: pos -->")
    assert conflicts(rounded) == []
    assert conflicts(quotes("84.21 <!-- fig: pos --> then 84.34 <!-- fig: pos -->")) != []


def test_a_shown_value_must_round_from_the_registry():
    assert agrees("754", 753.6) and agrees("753.6", 753.6047) and agrees("3,229", 3229.36)
    assert not agrees("84.2", 84.343) and not agrees("2,808", 2818.0)


# --- the pages ------------------------------------------------------------------------------------


def test_the_pages_mark_their_figures():
    found = _all_quotes()
    assert len(found) >= 30, len(found)
    readme = [q for q in found if q.page == "README.md"]
    assert len(readme) >= 15, "the README's headline figures carry figure ids"


def test_no_figure_appears_with_two_values():
    assert conflicts(_all_quotes()) == []


def test_every_marked_figure_is_registered_and_agrees():
    registry = _registry()
    problems = []
    for q in _all_quotes():
        if q.fig_id not in registry:
            problems.append(f"{q.page}:{q.line}: {q.fig_id!r} is not in bench/results/figures.json")
        elif not agrees(q.shown, registry[q.fig_id]["value"]):
            problems.append(f"{q.page}:{q.line}: {q.fig_id} shows {q.shown}, the registry says {registry[q.fig_id]['value']}")
    assert not problems, "\n".join(problems)


def test_every_registered_figure_names_its_conditions_and_is_quoted():
    quoted = {q.fig_id for q in _all_quotes()}
    for fig_id, entry in _registry().items():
        missing = [name for name in FIELDS if entry.get(name) in (None, "")]
        assert not missing, f"{fig_id}: no {missing}"
        assert fig_id in quoted, f"{fig_id} is registered but no page quotes it"


@pytest.mark.parametrize("fig_id", sorted(_registry()))
def test_the_registry_value_is_the_results_files(fig_id):
    entry = _registry()[fig_id]
    found = source_value(entry["source"], entry.get("scale", 1.0))
    value = entry["value"]
    if isinstance(found, str):
        written = f"{value:,}" if value >= 1000 and "," in found else str(value)
        assert written in found, f"{fig_id}: {written} is not in {entry['source']}"
    else:
        assert agrees(str(value), found), f"{fig_id}: the registry says {value}, {entry['source']} holds {found}"
