"""A change report on disk and on screen: JSON (everything), TSV (one row per word), the
explanation of a word (its senses' shares in A and B), and the saved senses that
``spacy elmo explore`` reads."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Dict, List, Union

from ..senses.induce import file_stem, save_senses
from .detect import ChangeReport, WordChange
from .measures import MEASURES

MEASURE_NAMES = {"apd": "APD", "apd_c": "APD-c", "prt": "PRT", "jsd": "JSD", "mahal": "MAHAL"}


def _round(value: float) -> float:
    return round(float(value), 4)


def word_json(change: WordChange) -> Dict[str, Any]:
    """One word's part of the JSON report (example sentences as text, the word's span in each)."""
    ws = change.word_senses
    occurrences = ws.occurrences if ws is not None else []

    def example(i: int) -> Dict[str, Any]:
        o = occurrences[i]
        return {"text": o.text, "start": o.start, "end": o.end, "source": o.source}

    return {
        "word": change.word,
        "rank": change.rank,
        "occurrences": {"a": change.n_a, "b": change.n_b},
        "seen": {"a": change.seen_a, "b": change.seen_b},
        "measures": {k: _round(v) for k, v in change.measures.items()},
        "intervals": {k: [_round(lo), _round(hi)] for k, (lo, hi) in change.intervals.items()},
        "changed": change.changed,
        "note": change.note,
        "senses": [
            {
                "id": s.id,
                "name": s.name,
                "substitutes": s.substitutes,
                "share_a": _round(s.share_a),
                "share_b": _round(s.share_b),
                "count_a": s.count_a,
                "count_b": s.count_b,
                "status": s.status,
                "examples_a": [example(i) for i in s.examples_a],
                "examples_b": [example(i) for i in s.examples_b],
            }
            for s in change.senses
        ],
    }


def report_json(report: ChangeReport) -> Dict[str, Any]:
    """The whole report as JSON values."""
    return {
        "corpora": {"a": report.names[0], "b": report.names[1]},
        "measure": report.measure,
        "seconds": round(report.seconds, 1),
        "settings": report.settings,
        "words": [word_json(c) for c in report.words],
    }


TSV_COLUMNS = ["rank", "word", "n_a", "n_b", *[m for name in MEASURES for m in (name, f"{name}_low", f"{name}_high")], "changed", "senses"]


def report_tsv(report: ChangeReport) -> str:
    """One row per word (ranked first): occurrences, each measure with its interval, the binary call, the senses' shares."""
    out = io.StringIO()
    writer = csv.writer(out, delimiter="\t", lineterminator="\n")
    writer.writerow(TSV_COLUMNS)
    for c in report.words:
        row: List[Any] = [c.rank or "", c.word, c.n_a, c.n_b]
        for name in MEASURES:
            if name in c.measures:  # MAHAL is not computed on too few occurrences
                low, high = c.intervals[name]
                row += [f"{c.measures[name]:.4f}", f"{low:.4f}", f"{high:.4f}"]
            else:
                row += ["", "", ""]
        row.append("" if c.changed is None else int(c.changed))
        row.append("; ".join(f"{s.name} {s.share_a:.2f}->{s.share_b:.2f} ({s.status})" for s in c.senses))
        writer.writerow(row)
    return out.getvalue()


def explain(change: WordChange, names: Any = ("A", "B"), width: int = 90, min_share: float = 0.05) -> List[str]:
    """Lines a person can check: the word's measures, then each sense with its shares and an example
    from each corpus (senses under ``min_share`` of both corpora that neither appeared nor vanished
    are counted in one line; the JSON report lists them all)."""
    if not change.measured:
        return [change.note or f"{change.word}: not measured"]
    m = change.measures
    head = f"{change.rank}. {change.word}: " + ", ".join(
        f"{MEASURE_NAMES[k]} {m[k]:.3f} [{change.intervals[k][0]:.3f}, {change.intervals[k][1]:.3f}]" for k in MEASURES if k in m
    )
    lines = [head + f"; binary: {'changed' if change.changed else 'no change'} ({change.n_a} in {names[0]}, {change.n_b} in {names[1]})"]
    ws = change.word_senses
    shown = [s for s in change.senses if max(s.share_a, s.share_b) >= min_share or s.status in ("appeared", "vanished")]
    for s in shown:
        lines.append(f"   {s.name}: {s.share_a:.0%} of {names[0]} -> {s.share_b:.0%} of {names[1]} ({s.status})")
        for label, examples in ((names[0], s.examples_a), (names[1], s.examples_b)):
            if examples and ws is not None:
                text = " ".join(ws.occurrences[examples[0]].text.split())
                lines.append(f"      {label}: {text[:width]}{'…' if len(text) > width else ''}")
    if len(shown) < len(change.senses):
        hidden = len(change.senses) - len(shown)
        lines.append(f"   ({hidden} smaller sense{'s' if hidden != 1 else ''}, under {min_share:.0%} of either corpus: see report.json)")
    return lines


def write_report(report: ChangeReport, out: Union[str, Path], pages: bool = True, neighbours: int = 10) -> Dict[str, Path]:
    """Write ``report.json``, ``report.tsv``, ``senses/`` (each word's senses for explore) and, with
    ``pages``, ``pages/WORD.html`` (needs Plotly; the pages share one ``pages/plotly.min.js``) into
    ``out``; returns what was written."""
    from ..files import write_bytes, write_json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = {
        "json": write_json(out / "report.json", report_json(report)),
        "tsv": write_bytes(out / "report.tsv", report_tsv(report).encode("utf-8")),
    }
    saved = [c.word_senses for c in report.words if c.word_senses is not None and c.word_senses.occurrences]
    if saved:
        save_senses(out / "senses", saved)
        written["senses"] = out / "senses"
    if pages and saved:
        from ..senses.explore import write_explore_page

        for ws in saved:
            title = f"“{ws.word}” in {report.names[0]} and {report.names[1]}"
            page = out / "pages" / f"{file_stem(ws.word)}.html"
            write_explore_page(ws, page, neighbours=neighbours, title=title, shared_plotly=True)
        written["pages"] = out / "pages"
    return written
