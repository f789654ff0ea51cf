"""A change report on disk and on screen: JSON (everything), TSV (one row per word), the
explanation of a word (its senses' shares in A and B), and the saved senses that
``spacy elmo explore`` reads, each carrying what its page shows of the word's change (its rank,
each measure with its interval, the binary call and each sense's status)."""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from ..induction.induce import file_stem, save_senses
from ..induction.induced import WordSenses
from .detect import ChangeReport, WordChange, equal_size_counts
from .measures import MEASURES

MEASURE_NAMES = {"apd": "APD", "apd_c": "APD-c", "prt": "PRT", "jsd": "JSD", "mahal": "MAHAL"}
OUTPUTS = ("report.json", "report.tsv", "senses", "pages")  # what write_report makes in its folder (and replaces whole)


def _round(value: float) -> float:
    return round(float(value), 4)


def binary_counts(change: WordChange) -> Optional[Tuple[List[int], List[int]]]:
    """The sense counts the binary call compared (A's and B's, by sense id): as in two samples of
    equal size, the larger sample's counts scaled down. Read from the word's record when it holds
    them (``binary_counts_a`` / ``binary_counts_b``), else worked out from its senses' counts the
    way the call does (:func:`.detect.equal_size_counts`); ``None`` for a word not measured."""
    if not change.measured or not change.senses:
        return None
    recorded = (change.word_senses.extra.get("change") if change.word_senses is not None else None) or {}
    a: Any = change.binary_counts_a  # empty until the binary call has run
    b: Any = change.binary_counts_b
    if not a or not b:
        a, b = recorded.get("binary_counts_a"), recorded.get("binary_counts_b")
    if not a or not b:
        k = max(s.id for s in change.senses) + 1
        counts = np.zeros((2, k), dtype=np.int64)
        for s in change.senses:
            counts[:, s.id] = (s.count_a, s.count_b)
        a, b = equal_size_counts(counts[0], counts[1])
    return [int(x) for x in a], [int(x) for x in b]


def word_json(change: WordChange) -> Dict[str, Any]:
    """One word's part of the JSON report (example sentences as text, the word's span in each)."""
    ws = change.word_senses
    occurrences = ws.occurrences if ws is not None else []

    def example(i: int) -> Dict[str, Any]:
        o = occurrences[i]
        return {"text": o.text, "start": o.start, "end": o.end, "source": o.source}

    counts = binary_counts(change)
    return {
        "word": change.word,
        "rank": change.rank,
        "occurrences": {"a": change.n_a, "b": change.n_b},
        "seen": {"a": change.seen_a, "b": change.seen_b},
        "measures": {k: _round(v) for k, v in change.measures.items()},
        "intervals": {k: [_round(lo), _round(hi)] for k, (lo, hi) in change.intervals.items()},
        "changed": change.changed,
        "test": change.test,  # what the binary call tested: "energy" (the senses' representation) or the ranking measure
        "p_value": change.p_value,  # its permutation test
        "q_value": change.q_value,  # adjusted over the words measured together (Benjamini-Hochberg)
        "binary_counts_a": counts[0] if counts else None,  # what the binary call compared (samples of equal size)
        "binary_counts_b": counts[1] if counts else None,
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
                "binary_count_a": counts[0][s.id] if counts else None,
                "binary_count_b": counts[1][s.id] if counts else None,
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
        counts = binary_counts(c)
        row.append("; ".join(f"{s.name} {s.share_a:.2f}->{s.share_b:.2f} ({_status(s, counts, min(c.n_a, c.n_b))})" for s in c.senses))
        writer.writerow(row)
    return out.getvalue()


def _status(sense: Any, counts: Optional[Tuple[List[int], List[int]]], size: int) -> str:
    """A sense's status with the counts the binary call compared: ``appeared: 0 -> 8 in samples of 10``."""
    if counts is None:
        return sense.status
    return f"{sense.status}: {counts[0][sense.id]} -> {counts[1][sense.id]} in samples of {size}"


def _test(change: WordChange) -> str:
    """`` (p = 0.001, q = 0.004)``: the permutation test behind the binary call, where it ran."""
    if change.p_value is None or change.q_value is None:
        return ""
    test = "energy test" if change.test == "energy" else f"permutation test of {MEASURE_NAMES.get(change.test or '', change.test)}"
    return f" ({test} p = {change.p_value:.2g}, q = {change.q_value:.2g})"


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
    counts = binary_counts(change)
    binary = (
        f"binary: {'changed' if change.changed else 'no change'}{_test(change)} ({change.n_a} in {names[0]}, {change.n_b} in {names[1]})"
    )
    lines = [f"{head}; {binary}"]
    size = min(change.n_a, change.n_b)
    ws = change.word_senses
    shown = [s for s in change.senses if max(s.share_a, s.share_b) >= min_share or s.status in ("appeared", "vanished")]
    for s in shown:
        noise = "" if s.share_p is None else (f"; within noise, p = {s.share_p:.2f}" if s.within_noise else f"; p = {s.share_p:.2g}")
        lines.append(f"   {s.name}: {s.share_a:.0%} of {names[0]} -> {s.share_b:.0%} of {names[1]} ({_status(s, counts, size)}{noise})")
        for label, examples in ((names[0], s.examples_a), (names[1], s.examples_b)):
            if examples and ws is not None:
                text = " ".join(ws.occurrences[examples[0]].text.split())
                lines.append(f"      {label}: {text[:width]}{'…' if len(text) > width else ''}")
    if len(shown) < len(change.senses):
        hidden = len(change.senses) - len(shown)
        lines.append(f"   ({hidden} smaller sense{'s' if hidden != 1 else ''}, under {min_share:.0%} of either corpus: see report.json)")
    return lines


def page_change(change: WordChange, report: ChangeReport) -> Dict[str, Any]:
    """What a word's page (and its saved senses) shows of its change: its rank among the measured
    words, each measure with its interval, the binary call with the counts it compared, and each
    sense's status (by sense id)."""
    counts = binary_counts(change)
    statuses: List[Optional[str]] = [None] * (max((s.id for s in change.senses), default=-1) + 1)
    for s in change.senses:
        statuses[s.id] = s.status
    return {
        "rank": change.rank,
        "ranked": sum(c.measured for c in report.words),
        "measure": report.measure,
        "names": {k: MEASURE_NAMES.get(k, k) for k in MEASURES if k in change.measures},
        "measures": {k: _round(v) for k, v in change.measures.items()},
        "intervals": {k: [_round(lo), _round(hi)] for k, (lo, hi) in change.intervals.items()},
        "confidence": report.settings.get("confidence"),
        "changed": change.changed,
        "test": change.test,
        "p_value": change.p_value,
        "q_value": change.q_value,
        "sample": [change.n_a, change.n_b],
        "binary_counts": [counts[0], counts[1]] if counts else None,
        "statuses": statuses,
        "note": change.note,
    }


def _with_change(change: WordChange, report: ChangeReport) -> WordSenses:
    ws = change.word_senses
    assert ws is not None
    recorded = ws.extra.get("change") or {}
    return dataclasses.replace(ws, extra={**ws.extra, "change": {**recorded, **page_change(change, report)}})


def write_report(report: ChangeReport, out: Union[str, Path], pages: bool = True, neighbours: int = 10) -> Dict[str, Path]:
    """Write ``report.json``, ``report.tsv``, ``senses/`` (each word's senses for explore) and, with
    ``pages``, ``pages/WORD.html`` (needs Plotly; the pages share one ``pages/plotly.min.js``) into
    ``out``; returns what was written.

    Everything is written into a scratch folder beside ``out`` and moved in when complete
    (:func:`..files.write_into`): a failure leaves ``out`` as it was, and ``senses/`` and ``pages/``
    are replaced whole, so no word of an earlier run stays (other files in ``out`` are left alone)."""
    from ..files import write_bytes, write_into, write_json

    out = Path(out)
    saved = [_with_change(c, report) for c in report.words if c.word_senses is not None and c.word_senses.occurrences]

    def write(scratch: Path) -> Dict[str, str]:
        made = {"json": "report.json", "tsv": "report.tsv"}
        write_json(scratch / "report.json", report_json(report))
        write_bytes(scratch / "report.tsv", report_tsv(report).encode("utf-8"))
        if saved:
            save_senses(scratch / "senses", saved)
            made["senses"] = "senses"
        if pages and saved:
            from ..explore.page import write_explore_page

            for ws in saved:
                title = f"“{ws.word}” in {report.names[0]} and {report.names[1]}"
                page = scratch / "pages" / f"{file_stem(ws.word)}.html"
                write_explore_page(ws, page, neighbours=neighbours, title=title, shared_plotly=True)
            made["pages"] = "pages"
        return made

    made = write_into(out, write, owned=OUTPUTS)
    return {key: out / name for key, name in made.items()}
