#!/usr/bin/env python3
"""Do ELMo vectors separate word senses in context? A check on hand-written sentences.

24 ambiguous words, two senses each, six sentences per sense, written for this probe (not taken
from any evaluation set; bench/data/sense-probe.json). Each sentence is embedded with the ``elmo`` component; we report the
mean cosine similarity of the word's vectors within a sense and across senses, and
leave-one-out nearest-centroid sense accuracy (the paper's WSD method), per word and over all
288 sentences. A static vector (the context-free layer 0) gives the same vector in every
sentence: similarity 1.0 everywhere and chance-level accuracy. The centroids are a
``spacy_elmo.senses.SenseInventory`` (the ``elmo_senses`` component's).

    python bench/senses.py [--weights PATH] [--mix average|top|layer:N] [--summary] [--json]

``--summary`` prints only the overall accuracy for the mixes top, average and layer:1.
"""
from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
from bench_common import elmo_nlp

from spacy_elmo.senses import SenseInventory

# word -> ((sense, sentences), (sense, sentences)), written for this probe: bench/data/sense-probe.json
SENSES: Dict[str, Tuple[Tuple[str, List[str]], ...]] = {
    word: tuple(senses.items()) for word, senses in json.loads((Path(__file__).parent / "data" / "sense-probe.json").read_text(encoding="utf-8")).items()
}


def vectors_of(nlp, word: str, sentences: List[str]) -> np.ndarray:
    rows = []
    for doc in nlp.pipe(sentences):
        token = next(t for t in doc if t.lower_ == word)
        rows.append(token._.elmo)
    return np.stack(rows)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def evaluate(nlp) -> Dict[str, Dict[str, float]]:
    report = {}
    for word, ((sense_a, sents_a), (sense_b, sents_b)) in SENSES.items():
        va, vb = vectors_of(nlp, word, sents_a), vectors_of(nlp, word, sents_b)
        within = [cosine(x, y) for v in (va, vb) for x, y in itertools.combinations(v, 2)]
        across = [cosine(x, y) for x in va for y in vb]
        vectors = np.concatenate([va, vb])
        labels = [sense_a] * len(va) + [sense_b] * len(vb)
        correct = 0
        for i in range(len(labels)):  # leave one out: centroids of the other sentences, nearest by cosine
            rest = [j for j in range(len(labels)) if j != i]
            inventory = SenseInventory()
            inventory.add_vectors([word] * len(rest), [labels[j] for j in rest], vectors[rest])
            correct += int(inventory.disambiguate_vector(word, vectors[i]).sense == labels[i])
        report[word] = {
            "senses": f"{sense_a} / {sense_b}",
            "within_sense_cos": float(np.mean(within)),
            "across_sense_cos": float(np.mean(across)),
            "nearest_centroid_accuracy": correct / len(labels),
        }
    return report


def overall_accuracy(report: Dict[str, Dict[str, float]]) -> float:
    """Leave-one-out nearest-centroid accuracy over every sentence of every word."""
    total = sum(2 * len(SENSES[w][0][1]) for w in report)
    return sum(r["nearest_centroid_accuracy"] * 2 * len(SENSES[w][0][1]) for w, r in report.items()) / total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="model path (default: the embedded default model)")
    ap.add_argument("--mix", default="average")
    ap.add_argument("--summary", action="store_true", help="overall accuracy for the mixes top, average and layer:1")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.summary:
        rows = {mix: evaluate(elmo_nlp(mix=mix, weights=args.weights or None)) for mix in ("top", "average", "layer:1")}
        if args.json:
            print(json.dumps({mix: {"overall_accuracy": overall_accuracy(r), "words": r} for mix, r in rows.items()}, indent=1))
            return
        print("| mix | words | sentences | nearest-centroid accuracy (leave-one-out) | mean cos within / across |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for mix, r in rows.items():
            within = np.mean([x["within_sense_cos"] for x in r.values()])
            across = np.mean([x["across_sense_cos"] for x in r.values()])
            n = sum(2 * len(SENSES[w][0][1]) for w in r)
            print(f"| {mix} | {len(r)} | {n} | {overall_accuracy(r):.1%} | {within:.2f} / {across:.2f} |")
        return
    report = evaluate(elmo_nlp(mix=args.mix, weights=args.weights or None))
    if args.json:
        print(json.dumps({"overall_accuracy": overall_accuracy(report), "words": report}, indent=1))
        return
    print("| word | senses | cos within a sense | cos across senses | nearest-centroid accuracy (leave-one-out) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for word, r in report.items():
        print(f"| {word} | {r['senses']} | {r['within_sense_cos']:.2f} | {r['across_sense_cos']:.2f} | {r['nearest_centroid_accuracy']:.0%} |")
    print(f"| **all {len(report)} words** | | | | **{overall_accuracy(report):.1%}** |")


if __name__ == "__main__":
    main()
