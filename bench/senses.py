#!/usr/bin/env python3
"""Do ELMo vectors separate word senses in context? A small check on hand-written sentences.

For each ambiguous word, sentences of two senses are embedded with the ``elmo`` component;
we report the mean cosine similarity of the word's vectors within a sense and across senses,
and leave-one-out nearest-centroid sense accuracy (the paper's WSD method). A static vector
(the context-free layer 0) gives the same vector in every sentence: similarity 1.0 everywhere
and chance-level accuracy.

    python bench/senses.py [--weights PATH] [--mix average|top|layer:N]
"""
from __future__ import annotations

import argparse
import itertools
import json
from typing import Dict, List, Tuple

import numpy as np
import spacy

SENSES: Dict[str, Tuple[Tuple[str, List[str]], Tuple[str, List[str]]]] = {
    "bank": (
        ("river", [
            "He sat down on the bank of the river and watched the water .",
            "The boat drifted slowly toward the muddy bank .",
            "Wild flowers grew along the green bank of the stream .",
            "They walked along the bank until they reached the old bridge .",
            "The children fished from the steep bank of the brook .",
        ]),
        ("money", [
            "She put all her money in the bank .",
            "The bank refused to lend him any more money .",
            "He had a clerk's place at a bank in the city .",
            "The bank paid interest on every deposit .",
            "My father kept his savings in the county bank .",
        ]),
    ),
    "play": (
        ("theatre", [
            "We went to the theatre to see a new play .",
            "The play was written by a young poet and performed in London .",
            "The actors rehearsed the play for many weeks .",
            "In the third act of the play the king dies .",
            "She read the play aloud to her sisters .",
        ]),
        ("game", [
            "The boys went out to play in the garden .",
            "The children play football in the field every afternoon .",
            "Let us play a game of cards after dinner .",
            "The little dog loved to play with the ball .",
            "They would play on the sand until the tide came in .",
        ]),
    ),
    "light": (
        ("illumination", [
            "The light of the lamp fell upon the table .",
            "There was not enough light to read by .",
            "A faint light shone from the window of the cottage .",
            "The morning light came through the curtains .",
            "He saw a light moving across the dark field .",
        ]),
        ("not heavy", [
            "The basket was light enough for a child to carry .",
            "She wore a light summer dress .",
            "The box was so light that he lifted it with one hand .",
            "He had a light step and walked quickly .",
            "Take only a light bag for the journey .",
        ]),
    ),
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
        labelled = [(v, 0) for v in va] + [(v, 1) for v in vb]
        correct = 0
        for i, (v, label) in enumerate(labelled):
            rest = [x for j, x in enumerate(labelled) if j != i]
            centroids = [np.mean([x for x, l in rest if l == k], axis=0) for k in (0, 1)]
            correct += int(np.argmax([cosine(v, c) for c in centroids]) == label)
        report[word] = {
            "senses": f"{sense_a} / {sense_b}",
            "within_sense_cos": float(np.mean(within)),
            "across_sense_cos": float(np.mean(across)),
            "nearest_centroid_accuracy": correct / len(labelled),
        }
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="model path (default: the embedded default model)")
    ap.add_argument("--mix", default="average")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    nlp = spacy.blank("en")
    config = {"mix": args.mix}
    if args.weights:
        config["weights"] = args.weights
    nlp.add_pipe("elmo", config=config)
    report = evaluate(nlp)
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print("| word | senses | cos within a sense | cos across senses | nearest-centroid accuracy (leave-one-out) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for word, r in report.items():
        print(f"| {word} | {r['senses']} | {r['within_sense_cos']:.2f} | {r['across_sense_cos']:.2f} | {r['nearest_centroid_accuracy']:.0%} |")


if __name__ == "__main__":
    main()
