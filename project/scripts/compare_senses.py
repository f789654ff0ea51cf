#!/usr/bin/env python3
"""Compare the senses two models induced for the same words (written by `spacy elmo induce`).

    python scripts/compare_senses.py senses/biomed-general senses/biomed-adapted --out metrics/biomed-senses.md

The pseudoword check of each folder first (``induce --check`` writes ``pseudoword-check.json``), then for each word both folders hold: the number of senses each model found, each sense's name and
size, and how far the two clusterings agree on the same occurrences (adjusted Rand index over
the occurrences both kept; 1 = the same partition, about 0 = unrelated). A Markdown report.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, List

from spacy_elmo.induction.clustering import adjusted_rand
from spacy_elmo.induction.induce import load_senses


def _senses(n: int) -> str:
    return f"{n} sense" if n == 1 else f"{n} senses"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    before = {r.word: r for r in load_senses(args.before)}
    after = {r.word: r for r in load_senses(args.after)}
    lines: List[str] = [f"# Induced senses: {args.before} vs {args.after}", ""]
    checks = {name: folder / "pseudoword-check.json" for name, folder in (("before", args.before), ("after", args.after))}
    if all(path.is_file() for path in checks.values()):  # induce --check: does induction work on this text, before and after?
        scores = {name: json.loads(path.read_text(encoding="utf-8")) for name, path in checks.items()}
        lines += ["| pseudoword check | mean ARI | pairs |", "|---|---:|---|"]
        for name, score in scores.items():
            pairs = ", ".join(f"{p['first']}+{p['second']} {p['ari']:.2f}" for p in score["pairs"])
            lines.append(f"| {name} | {score['mean_ari']:.2f} | {pairs} |")
        lines.append("")
    for word in [w for w in before if w in after]:
        a, b = before[word], after[word]
        key: Dict[tuple, int] = {(o.source, o.text, o.start): i for i, o in enumerate(b.occurrences)}
        shared = [(i, key[(o.source, o.text, o.start)]) for i, o in enumerate(a.occurrences) if (o.source, o.text, o.start) in key]
        ari = adjusted_rand(a.labels[[i for i, _ in shared]], b.labels[[j for _, j in shared]]) if shared else float("nan")
        lines += [
            f"## {word}",
            "",
            f"{_senses(len(a.senses))} before, {len(b.senses)} after; agreement on {len(shared)} shared occurrences (ARI) {ari:.2f}",
            "",
        ]
        lines += ["| before | n | after | n |", "|---|---:|---|---:|"]
        for k in range(max(len(a.senses), len(b.senses))):
            left = (a.senses[k].name, a.senses[k].count) if k < len(a.senses) else ("", "")
            right = (b.senses[k].name, b.senses[k].count) if k < len(b.senses) else ("", "")
            lines.append(f"| {left[0]} | {left[1]} | {right[0]} | {right[1]} |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
