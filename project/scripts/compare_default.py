#!/usr/bin/env python3
"""The rebuilt default beside the shipped one: the same measures, run now on the same data.

    python scripts/compare_default.py packages/en_default-rebuilt --books corpus/full-general --ud corpus/ud-ewt \\
        --output metrics/default-compare.md

Both models are measured by the same commands (``python -m spacy_elmo evaluate``: exact held-out
perplexity, forward / backward / average, on the books' and UD EWT's test text; ``python -m
spacy_elmo sense-probe --mix top``: the hand-written sense probe), so the table compares like with like; it also
names the figures the model card records for the shipped model. Prints a markdown table and writes
it to ``--output`` (and the raw figures beside it as JSON).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

# the model card's figures for the shipped default (docs/model-card.md, "Metrics")
MODEL_CARD = {"books": 106.5, "ud": 143.6, "senses": 0.799}


def perplexity(model: str, corpus: Path, threads: int, limit: int) -> Dict[str, float]:
    return json_of([sys.executable, "-m", "spacy_elmo", "evaluate", model, str(corpus), "--split", "test", "--threads", str(threads),
                    "--limit", str(limit)])


def sense_probe(model: str) -> float:
    return float(json_of([sys.executable, "-m", "spacy_elmo", "sense-probe", "--weights", model, "--mix", "top"])["overall_accuracy"])


def json_of(cmd: List[str]) -> Dict:
    """Run a spacy_elmo command with ``--output`` in a temporary folder and return what it wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        run(cmd + ["--output", str(out)])
        return json.loads(out.read_text(encoding="utf-8"))


def run(cmd: List[str]) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{result.stderr[-2000:]}")
    return result.stdout


def table(figures: Dict[str, Dict[str, float]], names: Dict[str, str]) -> str:
    rows = [
        "| measure | shipped (`en_default`) | rebuilt | model card (shipped) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, label in (("books", "Gutenberg test books, perplexity avg"), ("ud", "UD EWT test text, perplexity avg")):
        if key in figures["shipped"]:
            shipped, rebuilt = figures["shipped"][key], figures["rebuilt"][key]
            rows.append(f"| {label} | {shipped:.1f} | {rebuilt:.1f} | {MODEL_CARD[key]} |")
    if "senses" in figures["shipped"]:
        rows.append(
            f"| sense probe, mix `top` | {figures['shipped']['senses']:.1%} | {figures['rebuilt']['senses']:.1%} | {MODEL_CARD['senses']:.1%} |"
        )
    return "\n".join(rows) + f"\n\nrebuilt: {names['rebuilt']}; shipped: {names['shipped']}\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rebuilt", help="the rebuilt model folder (ship's output)")
    ap.add_argument("--shipped", default="en_default", help="the shipped model (default: the embedded en_default)")
    ap.add_argument("--books", type=Path, required=True, help="prepared books corpus (its test split is scored)")
    ap.add_argument("--ud", type=Path, help="prepared UD EWT text corpus (its test split is scored)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="score only the first N test sentences (0 = all)")
    ap.add_argument("--no-senses", action="store_true", help="leave out the sense probe")
    ap.add_argument("--output", type=Path, required=True, help="markdown table to write (JSON beside it)")
    args = ap.parse_args(argv)
    names = {"shipped": args.shipped, "rebuilt": args.rebuilt}
    figures: Dict[str, Dict[str, float]] = {"shipped": {}, "rebuilt": {}}
    for which, model in names.items():
        figures[which]["books"] = perplexity(model, args.books, args.threads, args.limit)["ppl_avg"]
        if args.ud is not None:
            figures[which]["ud"] = perplexity(model, args.ud, args.threads, args.limit)["ppl_avg"]
        if not args.no_senses:
            figures[which]["senses"] = sense_probe(model)
    text = table(figures, names)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    args.output.with_suffix(".json").write_text(json.dumps({"models": names, "figures": figures, "model_card": MODEL_CARD}, indent=2) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
