#!/usr/bin/env python3
"""WiC (word in context) with a biLM and no training: cosine of the target word's two vectors.

For every pair, both (pre-tokenized) sentences are embedded with the biLM and the target
word's vector is taken at the index the data gives, per layer and for mixes of layers. A pair
is called "same sense" when the cosine is above a threshold. The protocol keeps every choice
off the test set:

- the threshold of each layer/mix is the one that maximises accuracy on **train**;
- the layer/mix is the one whose train threshold scores best on **dev**;
- **test** accuracy is reported for that choice (and, for information, for every layer/mix).

    python bench/wic.py [--weights PATH] [--data ../shared/data/wic] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

from spacy_elmo.bilm import load_bilm

SPLITS = ("train", "dev", "test")


def read_split(folder: Path, split: str) -> Tuple[List[Tuple[List[str], int, List[str], int]], np.ndarray]:
    """(tokens1, index1, tokens2, index2) per pair and the gold labels (1 = same sense)."""
    pairs = []
    with (folder / f"{split}.data.txt").open(encoding="utf-8") as fh:
        for line in fh:
            _word, _pos, indices, s1, s2 = line.rstrip("\n").split("\t")
            i1, i2 = (int(x) for x in indices.split("-"))
            pairs.append((s1.split(" "), i1, s2.split(" "), i2))
    gold = [line.strip() == "T" for line in (folder / f"{split}.gold.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(gold) != len(pairs):
        raise ValueError(f"{split}: {len(pairs)} pairs but {len(gold)} labels")
    return pairs, np.array(gold, dtype=bool)


def mixes(n_layers: int) -> Dict[str, np.ndarray]:
    """Layer weights of each candidate: every single layer, the average, the contextual average."""
    out = {f"layer {i}": np.eye(n_layers)[i] for i in range(n_layers)}
    out["average (all layers)"] = np.full(n_layers, 1.0 / n_layers)
    out["average of layers 1-%d" % (n_layers - 1)] = np.r_[0.0, np.full(n_layers - 1, 1.0 / (n_layers - 1))]
    return out


def target_vectors(bilm, pairs, batch_tokens: int) -> Tuple[np.ndarray, np.ndarray]:
    """[N, L, D] target vectors of the first and of the second sentence of each pair."""
    sentences: List[Sequence[str]] = []
    for s1, _, s2, _ in pairs:
        sentences += [s1, s2]
    out = bilm.embed_sentences(sentences, max_batch_tokens=batch_tokens)
    a = np.stack([out[2 * k][:, i1] for k, (_, i1, _, _) in enumerate(pairs)])
    b = np.stack([out[2 * k + 1][:, i2] for k, (_, _, _, i2) in enumerate(pairs)])
    return a, b


def cosines(a: np.ndarray, b: np.ndarray, weights: np.ndarray) -> np.ndarray:
    va, vb = np.einsum("nld,l->nd", a, weights), np.einsum("nld,l->nd", b, weights)
    return (va * vb).sum(1) / (np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1) + 1e-12)


def best_threshold(scores: np.ndarray, gold: np.ndarray) -> Tuple[float, float]:
    """The threshold (midpoint between neighbouring scores) with the highest accuracy."""
    order = np.sort(np.unique(scores))
    candidates = np.concatenate([[order[0] - 1e-6], (order[:-1] + order[1:]) / 2, [order[-1] + 1e-6]])
    accs = [float(((scores > t) == gold).mean()) for t in candidates]
    k = int(np.argmax(accs))
    return float(candidates[k]), accs[k]


def evaluate(weights: str | None, folder: Path, batch_tokens: int = 4096) -> Dict[str, object]:
    start = time.time()
    bilm = load_bilm(weights) if weights else load_bilm()
    data = {split: read_split(folder, split) for split in SPLITS}
    vectors = {split: target_vectors(bilm, pairs, batch_tokens) for split, (pairs, _) in data.items()}
    n_layers = vectors["train"][0].shape[1]
    rows = {}
    for name, w in mixes(n_layers).items():
        scores = {split: cosines(*vectors[split], w) for split in SPLITS}
        threshold, train_acc = best_threshold(scores["train"], data["train"][1])
        rows[name] = {
            "threshold": threshold,
            "train": train_acc,
            "dev": float(((scores["dev"] > threshold) == data["dev"][1]).mean()),
            "test": float(((scores["test"] > threshold) == data["test"][1]).mean()),
        }
    chosen = max(rows, key=lambda k: (rows[k]["dev"], rows[k]["train"]))
    return {
        "weights": weights or "en_default",
        "chosen_on_dev": chosen,
        "test_accuracy": rows[chosen]["test"],
        "dev_accuracy": rows[chosen]["dev"],
        "rows": rows,
        "pairs": {split: int(len(data[split][1])) for split in SPLITS},
        "seconds": time.time() - start,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="model directory (default: the embedded default model)")
    ap.add_argument("--data", type=Path, default=Path("../shared/data/wic"))
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the report here")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    report = evaluate(args.weights, args.data)
    print("| layer / mix | threshold (train) | train | dev | test |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, r in report["rows"].items():
        mark = " (chosen on dev)" if name == report["chosen_on_dev"] else ""
        print(f"| {name}{mark} | {r['threshold']:.3f} | {100 * r['train']:.1f} | {100 * r['dev']:.1f} | {100 * r['test']:.1f} |")
    print(f"\nWiC test accuracy: {100 * report['test_accuracy']:.1f} ({report['chosen_on_dev']}, chosen on dev; "
          f"threshold from train; {report['pairs']['test']} test pairs; {report['seconds']:.0f} s)", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
