"""WiC (word in context, Pilehvar & Camacho-Collados 2019) with a biLM and no training.

For every pair, both (pre-tokenised) sentences are embedded and the target word's vector taken at
the index the data gives, per layer and for mixes of layers. A pair is called "same sense" when
the cosine of the two vectors is above a threshold. Every choice stays off the test set:

- the threshold of each layer/mix is the one that maximises accuracy on **train**;
- the layer/mix is the one whose train threshold scores best on **dev**;
- **test** accuracy is reported for that choice (and, for information, for every layer/mix).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..assets import ASSETS_DATA
from ..bilm.scalar_mix import apply_mix, spec_weights
from ..senses.vectors import candidate_mixes
from .items import item_string

DEFAULT_WIC_DIR = ASSETS_DATA / "wic"
SPLITS = ("train", "dev", "test")
Pair = Tuple[List[str], int, List[str], int]


def read_split(folder: Path, split: str) -> Tuple[List[Pair], np.ndarray]:
    """(tokens1, index1, tokens2, index2) per pair and the gold labels (True = same sense)."""
    path = Path(folder) / f"{split}.data.txt"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is the WiC data at {folder}?")
    pairs: List[Pair] = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 5:
                raise ValueError(
                    f"{path}:{number}: expected 5 tab-separated fields (word, POS, i-j, sentence 1, sentence 2), got {len(fields)}"
                )
            _word, _pos, indices, s1, s2 = fields
            i1, i2 = (int(x) for x in indices.split("-"))
            pairs.append((s1.split(" "), i1, s2.split(" "), i2))
    gold_path = Path(folder) / f"{split}.gold.txt"
    gold = [line.strip() == "T" for line in gold_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(gold) != len(pairs):
        raise ValueError(f"{split}: {len(pairs)} pairs but {len(gold)} labels")
    return pairs, np.array(gold, dtype=bool)


def target_vectors(bilm, pairs: Sequence[Pair], batch_tokens: int = 4096) -> Tuple[np.ndarray, np.ndarray]:
    """``[N, L+1, D]`` target vectors of the first and of the second sentence of each pair."""
    sentences: List[Sequence[str]] = []
    for s1, _, s2, _ in pairs:
        sentences += [s1, s2]
    out = bilm.embed_sentences(sentences, max_batch_tokens=batch_tokens)
    a = np.stack([out[2 * k][:, i1] for k, (_, i1, _, _) in enumerate(pairs)])
    b = np.stack([out[2 * k + 1][:, i2] for k, (_, _, _, i2) in enumerate(pairs)])
    return a, b


def cosines(a: np.ndarray, b: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Cosine of the two mixed vectors of every pair."""
    va, vb = apply_mix(a, weights, layer_axis=1), apply_mix(b, weights, layer_axis=1)
    return (va * vb).sum(1) / (np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1) + 1e-12)


def best_threshold(scores: np.ndarray, gold: np.ndarray) -> Tuple[float, float]:
    """The threshold (midpoint between neighbouring scores) with the highest accuracy, and that accuracy."""
    order = np.sort(np.unique(scores))
    candidates = np.concatenate([[order[0] - 1e-6], (order[:-1] + order[1:]) / 2, [order[-1] + 1e-6]])
    accs = [float(((scores > t) == gold).mean()) for t in candidates]
    k = int(np.argmax(accs))
    return float(candidates[k]), accs[k]


def evaluate(
    weights: Optional[str] = None, folder: Path = DEFAULT_WIC_DIR, batch_tokens: int = 4096, precision: str = "float32"
) -> Dict[str, Any]:
    """Threshold on train, layer/mix on dev, accuracy on test (see the module docstring);
    ``precision`` is the biLM's inference precision (``BiLM.set_inference_precision``)."""
    from ..hub.load import load_bilm

    start = time.time()
    bilm = load_bilm(weights) if weights else load_bilm()
    bilm.set_inference_precision(precision)
    data = {split: read_split(folder, split) for split in SPLITS}
    vectors = {split: target_vectors(bilm, pairs, batch_tokens) for split, (pairs, _) in data.items()}
    n_layers = vectors["train"][0].shape[1]
    rows: Dict[str, Dict[str, Any]] = {}
    correct: Dict[str, str] = {}
    for name, spec in candidate_mixes(n_layers).items():
        w = spec_weights(spec, n_layers)
        scores = {split: cosines(*vectors[split], w) for split in SPLITS}
        threshold, train_acc = best_threshold(scores["train"], data["train"][1])
        rows[name] = {
            "threshold": threshold,
            "train": train_acc,
            "dev": float(((scores["dev"] > threshold) == data["dev"][1]).mean()),
            "test": float(((scores["test"] > threshold) == data["test"][1]).mean()),
        }
        correct[name] = item_string((scores["test"] > threshold) == data["test"][1])
    chosen = max(rows, key=lambda k: (rows[k]["dev"], rows[k]["train"]))
    return {
        "weights": weights or "en_default",
        "precision": precision,
        "chosen_on_dev": chosen,
        "test_accuracy": rows[chosen]["test"],
        "dev_accuracy": rows[chosen]["dev"],
        # one character per test pair, in file order ("1" correct): paired comparisons of two models
        "test_correct": correct[chosen],
        "rows": rows,
        "pairs": {split: int(len(data[split][1])) for split in SPLITS},
        "seconds": time.time() - start,
    }


def table(report: Dict[str, Any]) -> str:
    """The report as a markdown table (accuracy in %)."""
    lines = ["| layer / mix | threshold (train) | train | dev | test |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, r in report["rows"].items():
        mark = " (chosen on dev)" if name == report["chosen_on_dev"] else ""
        lines.append(f"| {name}{mark} | {r['threshold']:.3f} | {100 * r['train']:.1f} | {100 * r['dev']:.1f} | {100 * r['test']:.1f} |")
    return "\n".join(lines)
