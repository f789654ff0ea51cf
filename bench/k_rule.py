#!/usr/bin/env python3
"""Choosing the number-of-senses rule: ``induce`` with each candidate rule on the hand-labelled sense
sets, and optionally SemEval-2010's words, in one table.

    OMP_NUM_THREADS=1 python bench/k_rule.py [--weights W] [--rules 16:1.0,2:0.8,...] [--wsi DATA] --json bench/results/k-rule-MODEL.json

A rule is ``AXES:SIGNIFICANCE``: the split test reads that many leading principal axes of the
occurrences being split (``all`` = every one of the 16 principal coordinates ``induce`` keeps) and
keeps a split whose z-score against the null is below ``-SIGNIFICANCE``
(``InductionSettings.test_axes`` / ``significance``; ``induce --test-axes --significance``).

For each rule and set (``--sets``; ``labelled`` and ``natural`` are the tuning sets, ``registers``
was written after the rule was chosen, as its held-out check) it runs ``bench/sense_set.py
--induce-only`` as a user would run ``induce`` with that rule (its default representation) and
reports the mean ARI against the gold senses, the share of one-sense controls kept whole, the
share of ambiguous words split, and the named share. With ``--wsi`` it also runs ``wsi-eval``
(AVG and clusters per word on the 50 tuning and 50 held-out words).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

from bench_common import REPO, machine, write_results

SETS = {name: REPO / "tests" / "data" / "senses" / name for name in ("labelled", "natural", "registers")}
RULES = "all:1.0,2:1.0,2:0.8,3:0.8,4:0.8,1:1.0"


def parse_rules(text: str) -> List[Tuple[str, float]]:
    """``"all:1.0,2:0.8"`` -> ``[("all", 1.0), ("2", 0.8)]``."""
    out = []
    for item in text.split(","):
        axes, _, significance = item.strip().partition(":")
        if not (axes == "all" or axes.isdigit()) or not significance:
            raise SystemExit(f"--rules {item!r}: write AXES:SIGNIFICANCE, e.g. 2:0.8 or all:1.0")
        out.append((axes, float(significance)))
    return out


def induce_on_set(folder: Path, axes: str, significance: float, weights: str | None) -> Dict[str, Any]:
    """``bench/sense_set.py --induce-only`` with the rule: its ``induce`` summary."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.json"
        command = [sys.executable, str(REPO / "bench" / "sense_set.py"), "--folder", str(folder), "--induce-only", "--json", str(out)]
        command += ["--set", f"test_axes={'None' if axes == 'all' else axes}", "--set", f"significance={significance}"]
        if weights:
            command += ["--weights", weights]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        summary = json.loads(out.read_text())["induce"]
    keep = ("mean_ari", "senses_per_word", "named_share", "name_words_accepted", "controls_one_sense", "ambiguous_two_or_more")
    keep += ("controls", "ambiguous_words")
    return {key: summary[key] for key in keep} | {"per_word": summary["per_word"]}


def wsi_on_data(data: Path, axes: str, significance: float, weights: str | None) -> Dict[str, Any]:
    """``wsi-eval`` with the rule: AVG and clusters per word, all / tuning / held-out words."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "wsi.json"
        command = [sys.executable, "-m", "spacy_elmo", "wsi-eval", "--data", str(data), "--threads", "1", "--output", str(out)]
        command += ["--test-axes", "0" if axes == "all" else axes, "--significance", str(significance)]
        if weights:
            command += ["--weights", weights]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        report = json.loads(out.read_text())
    return {part: report[key] for part, key in (("all", "ours"), ("tuning", "ours_tuning_words"), ("held_out", "ours_held_out_words"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", default=None, help="the biLM (default: the embedded default)")
    parser.add_argument("--rules", default=RULES, help=f"AXES:SIGNIFICANCE, comma-separated (default {RULES})")
    parser.add_argument("--sets", default=",".join(SETS), help="the labelled sets (default: all three)")
    parser.add_argument("--wsi", type=Path, default=None, help="SemEval-2010 Task 14 folder: also run wsi-eval per rule")
    parser.add_argument("--json", type=Path, default=None, help="write the results here (and a .md table beside it)")
    args = parser.parse_args()
    sets = [s.strip() for s in args.sets.split(",")]
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise SystemExit(f"--sets: {', '.join(unknown)} not among {', '.join(SETS)}")
    results: Dict[str, Any] = {
        "model": args.weights or "en_default",
        "machine": machine(1),
        "command": " ".join(["python", *sys.argv]),
        "rules": {},
    }
    head = "| rule (axes : z below) | " + " | ".join(f"{s}: ARI, controls whole, split, named" for s in sets)
    head += " | SemEval-2010 AVG (clusters per word): tuning / held-out |" if args.wsi else " |"
    lines = [head, "| --- |" + " --- |" * (len(sets) + (1 if args.wsi else 0))]
    for axes, significance in parse_rules(args.rules):
        name = f"{axes}:{significance:g}"
        row: Dict[str, Any] = {name: induce_on_set(SETS[name], axes, significance, args.weights) for name in sets}
        cells = [
            f"{r['mean_ari']:.3f}, {r['controls_one_sense']:.0%}, {r['ambiguous_two_or_more']:.0%}, {r['named_share']:.2f}"
            for r in (row[s] for s in sets)
        ]
        if args.wsi:
            row["semeval2010"] = w = wsi_on_data(args.wsi, axes, significance, args.weights)
            cells.append(
                f"{w['tuning']['AVG']:.1f} ({w['tuning']['clusters_per_word']:.2f}) / {w['held_out']['AVG']:.1f} ({w['held_out']['clusters_per_word']:.2f})"
            )
        results["rules"][name] = row
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    write_results(args.json, results, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
