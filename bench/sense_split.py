#!/usr/bin/env python3
"""Can the number-of-senses rule keep what the features carry? Per word of the hand-labelled sets,
the best two-way split of each representation against the gold senses, and the statistics a rule
could decide on.

    OMP_NUM_THREADS=1 python bench/sense_split.py [--weights PATH] [--json bench/results/sense-split.json]

For each set (``tests/data/senses/labelled`` and ``tests/data/senses/natural``, ambiguous words
and one-sense controls) and each representation (``context``, ``substitutes``,
``substitutes+context``), each word's occurrences are placed by the principal coordinates of their
cosine distances (as ``induce`` clusters them) and split in two by the rule's own 2-means:

- ``ari``: that split against the gold senses (ambiguous words): what a rule that splits could win;
- ``z``: the rule's statistic (``clustering.split_score``: the split against one Gaussian of the
  same spread; the default rule splits below -1);
- ``stability``: the mean ARI between the 2-means splits of 20 pairs of random 80% subsamples
  (Ben-Hur et al. 2002), and ``null_stability``, the same on Gaussian samples of the same spread.

A rule keeps its two promises on a set when some threshold on a statistic splits >= 80% of the
ambiguous words and keeps >= 80% of the controls at one sense; ``separable`` says whether any
threshold on each statistic does (the controls' and the ambiguous words' values do not overlap
enough to allow it otherwise).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch
from bench_common import REPO, machine, use_threads, write_results

sys.path.insert(0, str(REPO / "project" / "scripts"))

from labelled_senses import load_labelled  # noqa: E402

from spacy_elmo.induction.clustering import _two_means, adjusted_rand, cosine_distances, embed_distances, split_score  # noqa: E402

SETS = {"labelled": REPO / "tests" / "data" / "senses" / "labelled", "natural": REPO / "tests" / "data" / "senses" / "natural"}
REPRESENTATIONS = {"context": ["context"], "substitutes": ["substitutes"], "substitutes+context": ["substitutes", "context"]}


def stability(points: np.ndarray, rng: np.random.Generator, pairs: int = 20, share: float = 0.8) -> float:
    """Mean ARI, on the occurrences both hold, of the 2-means splits of ``pairs`` pairs of random subsamples."""
    n, size, values = len(points), int(share * len(points)), []
    for _ in range(pairs):
        labels = []
        for _side in range(2):
            keep = rng.choice(n, size, replace=False)
            full = np.full(n, -1)
            full[keep] = _two_means(points[keep] - points[keep].mean(0), rng)[0]
            labels.append(full)
        both = (labels[0] >= 0) & (labels[1] >= 0)
        values.append(adjusted_rand(labels[0][both], labels[1][both]))
    return float(np.mean(values))


def blocks_of(item, bilm, head) -> Dict[str, Any]:
    """The unit-row blocks ``induce`` clusters, for every representation, of one labelled word."""
    from spacy_elmo.induction.induce import Inducer, InductionSettings
    from spacy_elmo.induction.induced import Occurrence

    tokens, positions = item.tokens()
    inducer = Inducer(bilm, head, InductionSettings(min_occurrences=1, representation="substitutes+context"))
    for t, p in zip(tokens, positions):
        start = len(" ".join(t[:p])) + (1 if p else 0)
        inducer.add(item.word, t, p, Occurrence(" ".join(t), start, start + len(t[p])))
    inducer.flush()
    _vectors, _subs, _bags, blocks, _extra = inducer.representation(inducer.stores[item.word], [item.word, *item.forms])
    return {"substitutes": blocks[0], "context": blocks[1]}


def separable(values: List[float], controls: List[float], below: bool) -> bool:
    """Whether one threshold splits >= 80% of the ambiguous words and keeps >= 80% of the controls whole."""
    for t in sorted(set(values + controls)):
        split = [v <= t if below else v >= t for v in values]
        kept = [not (v <= t if below else v >= t) for v in controls]
        if np.mean(split) >= 0.8 and np.mean(kept) >= 0.8:
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", default=None, help="the biLM (default: the embedded default)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here (and a .md table beside it)")
    args = parser.parse_args()
    use_threads(1)
    from spacy_elmo.hub.load import load_bilm
    from spacy_elmo.induction.induce import load_head

    bilm, head = load_bilm(args.weights), load_head(args.weights)
    results: Dict[str, Any] = {"model": args.weights or "en_default", "machine": machine(1), "sets": {}}
    lines = ["| set | representation | mean ARI of the best split (ambiguous) | z: ambiguous / controls | stability: ambiguous / controls | a threshold keeps both promises (z / stability) |", "| --- | --- | ---: | --- | --- | --- |"]
    for set_name, folder in SETS.items():
        items = load_labelled(folder, kind="all")
        with torch.inference_mode():
            found = {item.word: (item, blocks_of(item, bilm, head)) for item in items}
        results["sets"][set_name] = {}
        for rep, parts in REPRESENTATIONS.items():
            words = {}
            for word, (item, blocks) in found.items():
                points = embed_distances(cosine_distances([blocks[p] for p in parts]))
                rng = np.random.default_rng(0)
                halves, z = split_score(points, rng)
                words[word] = {
                    "control": item.is_control,
                    "ari": None if item.is_control else adjusted_rand(item.gold, halves),
                    "z": float(z),
                    "stability": stability(points, rng),
                    "null_stability": float(np.mean([stability(rng.standard_normal(points.shape) * points.std(0), rng, 10) for _ in range(3)])),
                }
            amb = [w for w in words.values() if not w["control"]]
            con = [w for w in words.values() if w["control"]]
            summary = {
                "mean_ari": float(np.mean([w["ari"] for w in amb])),
                "separable_z": separable([w["z"] for w in amb], [w["z"] for w in con], below=True),
                "separable_stability": separable([w["stability"] for w in amb], [w["stability"] for w in con], below=False),
                "default_rule_splits": f"{sum(w['z'] < -1 for w in amb)} of {len(amb)} ambiguous, {sum(w['z'] < -1 for w in con)} of {len(con)} controls",
            }
            results["sets"][set_name][rep] = {"words": words, **summary}
            fmt = lambda ws, k: ", ".join(f"{w:.2f}" for w in sorted(x[k] for x in ws))  # noqa: E731
            lines.append(
                f"| {set_name} | {rep} | {summary['mean_ari']:.3f} | {fmt(amb, 'z')} / {fmt(con, 'z')} | "
                f"{fmt(amb, 'stability')} / {fmt(con, 'stability')} | {'yes' if summary['separable_z'] else 'no'} / "
                f"{'yes' if summary['separable_stability'] else 'no'} |"
            )
            print(lines[-1], flush=True)
    write_results(args.json, results, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
