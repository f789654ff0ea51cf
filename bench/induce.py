#!/usr/bin/env python3
"""Sense induction: speed and quality on SemEval-2010 Task 14, and on the hand-written sense probe.

    python bench/induce.py --data project/assets/data/wsi_semeval2010 [--threads 1] [--representation substitutes]
        [--prior-weight 0.75] [--pattern and|none]

Induces the senses of all 100 SemEval-2010 words from their 8,915 test instances with the
embedded default biLM on ``--threads`` threads (default 1), and reports the wall time (loading
the model, the biLM and its LM head over every instance, clustering, naming, graded weights)
beside F-S, V-M, AVG and clusters per word, for each representation asked for. The second set is
the sense probe's 24 hand-written ambiguous words (``python -m spacy_elmo sense-probe``; two
senses, six sentences each): words that took no part in choosing any setting, scored with the
same scorer. Writes
bench/results/induce.json and bench/results/induce.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_common import RESULTS, Clock, add_threads, machine, use_threads, write_results


def probe(representation: str, temperature: float, prior_weight: float, pattern: str | None, weights: str | None = None) -> dict:
    """Induction on the hand-written probe sentences (``spacy_elmo.evaluation.sense_probe``), scored against their two senses."""
    from spacy_elmo.evaluation.sense_probe import probe_senses
    from spacy_elmo.evaluation.wsi_score import score
    from spacy_elmo.induction.induce import InductionSettings, induce

    sentences, gold, senses = [], {}, probe_senses()
    for word, pairs in senses.items():
        for sense, texts in pairs:
            for text in texts:
                gold.setdefault(word, {})[f"text {len(sentences)}"] = sense
                sentences.append(text)
    settings = InductionSettings(
        representation=representation, min_occurrences=4, temperature=temperature, prior_weight=prior_weight, pattern=pattern
    )
    with Clock() as clock:
        results = induce(sentences, list(senses), weights=weights, settings=settings, progress=False)
        system = {r.word: {o.source: str(c) for o, c in zip(r.occurrences, r.labels)} for r in results}
        result = score(system, gold)
    return {**result.as_dict(), "seconds": round(clock.seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path("project/assets/data/wsi_semeval2010"))
    add_threads(parser)
    parser.add_argument("--representation", default="substitutes,vectors,both,context,substitutes+context")
    parser.add_argument("--weights", default=None, help="the biLM (default: the embedded default)")
    parser.add_argument("--context", type=int, default=0, help="context tokens of the surrounding sentences on each side")
    parser.add_argument("--temperature", type=float, default=0.5, help="temperature of the substitute distributions")
    parser.add_argument("--prior-weight", type=float, default=0.75, help="alpha of the prior correction of the substitutes (0 = off)")
    parser.add_argument("--pattern", default="and", help="a word for the symmetric pattern reading; none = off")
    parser.add_argument("--out", type=Path, default=RESULTS / "induce.json")
    args = parser.parse_args()
    use_threads(args.threads)
    pattern = None if args.pattern.lower() in ("", "none") else args.pattern

    from spacy_elmo.evaluation import wsi_eval
    from spacy_elmo.induction.induce import InductionSettings

    runs = []
    for representation in args.representation.split(","):
        settings = InductionSettings(
            representation=representation, temperature=args.temperature, prior_weight=args.prior_weight, pattern=pattern
        )
        with Clock() as clock:
            report = wsi_eval.evaluate(args.data, args.weights, settings, context=args.context, progress=False)
        wall = clock.seconds
        runs.append(
            {
                "representation": representation,
                "wall_seconds": round(wall, 1),
                "report": report,
                "probe": probe(representation, args.temperature, args.prior_weight, pattern, args.weights),
            }
        )
        ours = report["ours"]
        print(
            f"{representation}: F-S {ours['F-S']:.1f} V-M {ours['V-M']:.1f} AVG {ours['AVG']:.1f} "
            f"k/w {ours['clusters_per_word']:.1f}; {wall:.0f} s on {args.threads} thread(s); probe AVG {runs[-1]['probe']['AVG']:.1f}",
            flush=True,
        )
    out = {
        "model": args.weights or "en_default",
        "machine": machine(args.threads),
        "context_tokens": args.context,
        "temperature": args.temperature,
        "prior_weight": args.prior_weight,
        "pattern": pattern,
        "runs": runs,
    }
    lines = [
        "| representation | F-S | V-M | AVG | clusters/word | by centroid AVG | probe F-S / V-M / AVG | seconds (1 thread) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        o, c, p = run["report"]["ours"], run["report"]["ours_by_centroid"], run["probe"]
        lines.append(
            f"| {run['representation']} | {o['F-S']:.1f} | {o['V-M']:.1f} | {o['AVG']:.1f} | {o['clusters_per_word']:.1f} | {c['AVG']:.1f} | "
            f"{p['F-S']:.1f} / {p['V-M']:.1f} / {p['AVG']:.1f} | {run['wall_seconds']:.0f} |"
        )
    write_results(args.out, out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
