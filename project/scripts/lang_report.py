#!/usr/bin/env python3
"""A language's biLM figures in one markdown page: test perplexity beside the unigram baseline, and POS.

    python scripts/lang_report.py --lang de --ppl metrics/de-text-test.json --pos metrics/de-pos.json --out metrics/de-report.md

``--ppl`` is the JSON of ``python -m spacy_elmo evaluate ... --output`` (forward, backward and
average perplexity over the test split, and the add-one unigram baseline from the training counts
over the same predictions); ``--pos`` is the summary of ``downstream.py pos``. Each table carries
the command that made it and the machine, so the page can be pasted into a model card as it is.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))  # downstream.py, beside this script


def perplexity_table(ppl: Dict[str, Any]) -> List[str]:
    ratio = ppl["ppl_avg"] / ppl["unigram_ppl"]
    return [
        "| test split | forward | backward | average | unigram baseline | average / unigram | predictions |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {ppl['data']} | {ppl['ppl_fwd']:.1f} | {ppl['ppl_bwd']:.1f} | {ppl['ppl_avg']:.1f} | {ppl['unigram_ppl']:.1f} | "
        f"{ratio:.3f} | {ppl['tokens']:,} |",
        "",
        f"`python -m spacy_elmo evaluate {ppl['model']} {ppl['data']} --split {ppl['split']} --threads 1`",
    ]


def report(lang: str, ppl: Optional[Dict[str, Any]], pos: Optional[Dict[str, Any]]) -> str:
    from downstream import pos_table

    lines = [f"# The {lang} biLM: evaluation", ""]
    if ppl is not None:
        lines += ["## Test perplexity and the unigram baseline", "", *perplexity_table(ppl), ""]
    if pos is not None:
        machine = pos["machine"]
        steps = ", ".join(f"{steps} steps for {size} sentences" for size, steps in pos["protocol"]["steps"].items())
        lines += [
            "## POS",
            "",
            f"Trained on the first N sentences of `{pos['train_conllu']}`, scored once on `{pos['test_conllu']}` "
            f"({pos['data']['test']['sentences']:,} sentences, {pos['data']['test']['tokens']:,} words); {steps}; the last model "
            f"scored; seeds {', '.join(map(str, pos['protocol']['seeds']))}; {machine['cpu']}, {machine['threads']} thread a run.",
            "",
            pos_table(pos, lang).rstrip("\n"),
            "",
            f"`{pos['command']}`",
            "",
        ]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lang", required=True, help="the language, as the page names it")
    ap.add_argument("--ppl", type=Path, default=None, help="evaluate's JSON on the test split")
    ap.add_argument("--pos", type=Path, default=None, help="downstream.py pos's summary JSON")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    missing = [str(p) for p in (args.ppl, args.pos) if p is not None and not p.is_file()]
    if missing or (args.ppl is None and args.pos is None):
        raise SystemExit(f"lang_report.py: not found: {', '.join(missing)}" if missing else "lang_report.py: give --ppl, --pos or both")
    ppl = json.loads(args.ppl.read_text(encoding="utf-8")) if args.ppl else None
    pos = json.loads(args.pos.read_text(encoding="utf-8")) if args.pos else None
    text = report(args.lang, ppl, pos)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
