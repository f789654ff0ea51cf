"""A semantic-change benchmark with known truth, built from sense-annotated SemCor.

After Schlechtweg & Schulte im Walde (2020): for each lemma (with its part of speech) that has at
least two senses with ``min_per_sense`` annotated occurrences, two small corpora A and B are
sampled from its occurrences, disjoint, with sense distributions that differ by a controlled
amount. Each lemma gets one of four designs (seeded): *none* (the same distribution in both),
*graded* (B moves a random fraction ``t`` of its mass onto one sense), *gain* (a sense absent
from A holds 20-60% of B) and *loss* (the mirror of gain). The truth is the Jensen-Shannon
divergence of the two sampled gold distributions and, for the binary task, SemEval-2020 Task
1's rule applied to the gold counts.

Lemmas are split into a dev half and a test half by a hash of the lemma, so that a choice made on
dev (the default measure) is reported on lemmas it never saw.
"""

from __future__ import annotations

import time
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..evaluation.wsd_data import WsdSentence, iter_instances, load_corpus
from ..induction.induced import Occurrence
from .detect import ChangeSettings, WordChange, compare_samples
from .measures import MEASURES, BinaryRule, jsd
from .sample import Sampled

DESIGNS = ("none", "graded", "gain", "loss")


@dataclass
class SyntheticPair:
    """One lemma's two sampled corpora and their truth."""

    lemma: str  # "lemma|POS"
    design: str
    senses: List[str]  # the gold sense keys used
    counts_a: List[int]
    counts_b: List[int]
    a: List[Sampled]
    b: List[Sampled]
    split: str  # dev or test

    def truth_jsd(self) -> float:
        return jsd(np.asarray(self.counts_a, float), np.asarray(self.counts_b, float))

    def truth_changed(self, rule: BinaryRule) -> bool:
        return rule.changed(np.asarray(self.counts_a), np.asarray(self.counts_b))


def split_of(lemma: str) -> str:
    """``dev`` or ``test``, fixed by a hash of the lemma (about half each)."""
    return "dev" if zlib.crc32(lemma.encode("utf-8")) % 2 == 0 else "test"


def exact_counts(shares: np.ndarray, size: int) -> np.ndarray:
    """int counts summing to ``size`` in the proportions of ``shares`` (largest remainder)."""
    shares = np.asarray(shares, dtype=np.float64) / np.sum(shares)
    raw = shares * size
    counts = np.floor(raw).astype(np.int64)
    for i in np.argsort(-(raw - counts), kind="stable")[: size - int(counts.sum())]:
        counts[i] += 1
    return counts


def design_shares(design: str, base: np.ndarray, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """The sense distributions of A and B for one design, from the lemma's own distribution ``base``."""
    k = len(base)
    s = int(rng.integers(k))
    if design == "none":
        return base, base
    if design == "graded":
        t = float(rng.uniform(0.0, 1.0))
        target = np.eye(k)[s]
        moved = (1 - t) * base + t * target
        return (base, moved) if rng.random() < 0.5 else (moved, base)
    if design in ("gain", "loss"):
        without = base.copy()
        without[s] = 0.0
        without /= without.sum()
        share = float(rng.uniform(0.2, 0.6))
        rest = base.copy()
        rest[s] = 0.0
        with_sense = rest / rest.sum() * (1 - share)
        with_sense[s] = share
        return (without, with_sense) if design == "gain" else (with_sense, without)
    raise ValueError(f"design must be one of {', '.join(DESIGNS)}, got {design!r}")


def _sampled(sentence: WsdSentence, position: int, source: str) -> Sampled:
    words = [w.replace("_", " ") for w in sentence.words]
    text = " ".join(words)
    start = sum(len(w) + 1 for w in words[:position])
    return Sampled(tuple(sentence.words), position, Occurrence(text, start, start + len(words[position]), source))


def build_pairs(
    sentences: Sequence[WsdSentence],
    gold: Dict[str, List[str]],
    *,
    size: int = 50,
    min_per_sense: int = 20,
    max_senses: int = 3,
    max_lemmas: Optional[int] = None,
    seed: int = 0,
) -> List[SyntheticPair]:
    """One :class:`SyntheticPair` per eligible lemma (sorted by lemma), corpora of ``size`` occurrences each.

    A lemma is eligible with at least two senses of ``min_per_sense`` occurrences; its
    ``max_senses`` most frequent such senses are used. A design whose counts exceed a sense's
    occurrences is drawn again (a lemma is skipped after 20 tries).
    """
    if size < 2 or min_per_sense < 1 or max_senses < 2:
        raise ValueError(f"size must be >= 2, min_per_sense >= 1 and max_senses >= 2, got {size}, {min_per_sense}, {max_senses}")
    pools: Dict[str, Dict[str, List[Tuple[int, int, str]]]] = defaultdict(lambda: defaultdict(list))
    for s, i, iid, key in iter_instances(sentences):
        if iid in gold:
            pools[key][gold[iid][0]].append((s, i, iid))
    rng = np.random.default_rng(seed)
    out: List[SyntheticPair] = []
    for lemma in sorted(pools):
        senses = sorted((k for k, v in pools[lemma].items() if len(v) >= min_per_sense), key=lambda k: (-len(pools[lemma][k]), k))
        senses = senses[:max_senses]
        if len(senses) < 2:
            continue
        sizes = np.array([len(pools[lemma][k]) for k in senses], dtype=np.float64)
        base = sizes / sizes.sum()
        design = DESIGNS[int(rng.integers(len(DESIGNS)))]
        for _ in range(20):
            pa, pb = design_shares(design, base, rng)
            ca, cb = exact_counts(pa, size), exact_counts(pb, size)
            if np.all(ca + cb <= sizes):
                break
        else:
            continue
        a: List[Sampled] = []
        b: List[Sampled] = []
        for sense, na, nb in zip(senses, ca, cb):
            pool = pools[lemma][sense]
            order = rng.permutation(len(pool))
            for j, target in ((order[:na], a), (order[na : na + nb], b)):
                for index in j:
                    s, i, iid = pool[int(index)]
                    target.append(_sampled(sentences[s], i, iid))
        out.append(SyntheticPair(lemma, design, senses, [int(c) for c in ca], [int(c) for c in cb], a, b, split_of(lemma)))
        if max_lemmas is not None and len(out) >= max_lemmas:
            break
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (ties averaged); NaN for fewer than 3 values or a constant side."""
    from scipy.stats import spearmanr

    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(spearmanr(x, y).statistic)


def score(pairs: Sequence[SyntheticPair], changes: Sequence[WordChange], rule: BinaryRule) -> Dict[str, Any]:
    """Spearman of each measure against the true JSD, and the binary call's accuracy, for each split and overall."""
    out: Dict[str, Any] = {}
    for split in ("dev", "test", "all"):
        chosen = [(p, c) for p, c in zip(pairs, changes) if (split == "all" or p.split == split) and c.measured]
        truth = [p.truth_jsd() for p, _ in chosen]
        labels = [p.truth_changed(rule) for p, _ in chosen]
        calls = [bool(c.changed) for _, c in chosen]
        out[split] = {
            "lemmas": len(chosen),
            "changed": int(sum(labels)),
            "spearman": {m: round(_spearman_of(chosen, truth, m), 4) for m in MEASURES},
            "binary_accuracy": round(float(np.mean([a == b for a, b in zip(labels, calls)])), 4) if chosen else float("nan"),
            "called_changed": int(sum(calls)),
            "majority_baseline": round(max(np.mean(labels), 1 - np.mean(labels)), 4) if chosen else float("nan"),
        }
    return out


def _spearman_of(chosen: Sequence[Tuple[SyntheticPair, WordChange]], truth: Sequence[float], measure: str) -> float:
    """Spearman of ``measure`` against the truth over the lemmas it was computed for (MAHAL is not on too few occurrences)."""
    kept = [(c.measures[measure], t) for (_, c), t in zip(chosen, truth) if measure in c.measures]
    return spearman([v for v, _ in kept], [t for _, t in kept])


def threshold_call(pairs: Sequence[SyntheticPair], changes: Sequence[WordChange], measure: str, rule: BinaryRule) -> Dict[str, Any]:
    """The alternative binary call "changed when ``measure`` reaches a threshold": the threshold that
    is most accurate on the dev lemmas, and its accuracy on dev and on the held-out test lemmas."""
    rows = [(p.split, c.measures[measure], p.truth_changed(rule)) for p, c in zip(pairs, changes) if measure in c.measures]
    dev = [(v, t) for split, v, t in rows if split == "dev"]
    test = [(v, t) for split, v, t in rows if split == "test"]
    if not dev:
        return {}

    def accuracy(items: List[Tuple[float, bool]], threshold: float) -> float:
        return float(np.mean([(v >= threshold) == t for v, t in items])) if items else float("nan")

    best = max(sorted({v for v, _ in dev}), key=lambda th: accuracy(dev, th))
    return {"measure": measure, "threshold": round(best, 6), "dev": round(accuracy(dev, best), 4), "test": round(accuracy(test, best), 4)}


def evaluate(
    data: Union[str, Path],
    weights: Optional[Any] = None,
    settings: Optional[ChangeSettings] = None,
    *,
    size: int = 50,
    min_per_sense: int = 20,
    max_lemmas: Optional[int] = None,
    seed: int = 0,
    progress: bool = True,
    log: Optional[Callable[[str], None]] = None,
) -> Dict[str, Any]:
    """Build the benchmark from the SemCor under ``data`` (the WSD framework's folder), measure every
    pair with the biLM ``weights`` (default: the embedded model) and score it: per split, Spearman
    of each measure against the true JSD and binary accuracy; the best measure on dev and its test
    figure; one row per lemma."""
    import torch

    from ..hub.load import load_bilm
    from ..induction.induce import load_head

    started = time.perf_counter()
    settings = settings or ChangeSettings()
    sentences, gold = load_corpus(data, "semcor")
    pairs = build_pairs(sentences, gold, size=size, min_per_sense=min_per_sense, max_lemmas=max_lemmas, seed=seed)
    if not pairs:
        raise ValueError(f"no SemCor lemma has two senses with {min_per_sense} occurrences: lower min_per_sense")
    if log:
        counts = {d: sum(p.design == d for p in pairs) for d in DESIGNS}
        log(f"{len(pairs)} lemmas ({', '.join(f'{n} {d}' for d, n in counts.items())}), {size} occurrences per corpus")
    bilm = load_bilm(weights)
    head = load_head(weights)
    changes = compare_samples({p.lemma: (p.a, p.b) for p in pairs}, bilm, head, settings, names=("A", "B"), progress=progress)
    scores = score(pairs, changes, settings.rule)
    dev = scores["dev"]["spearman"]
    best = max(MEASURES, key=lambda m: -np.inf if np.isnan(dev[m]) else dev[m])
    return {
        "benchmark": {"data": "SemCor 3.0 (WSD framework)", "size": size, "min_per_sense": min_per_sense, "seed": seed},
        "settings": {
            "max_occurrences": settings.max_occurrences,
            "rule": {"at_least": settings.rule.at_least, "at_most": settings.rule.at_most},
            "representation": settings.induction.representation,
            "vectors": settings.vectors,
            "test": settings.test,
        },
        "weights": str(weights or "en_default"),
        "threads": torch.get_num_threads(),
        "seconds": round(time.perf_counter() - started, 1),
        "scores": scores,
        "best_on_dev": best,
        "best_on_test": scores["test"]["spearman"][best],
        "binary_by_threshold": threshold_call(pairs, changes, best, settings.rule),
        "lemmas": [
            {
                "lemma": p.lemma,
                "split": p.split,
                "design": p.design,
                "senses": p.senses,
                "counts_a": p.counts_a,
                "counts_b": p.counts_b,
                "truth_jsd": round(p.truth_jsd(), 4),
                "truth_changed": p.truth_changed(settings.rule),
                "measures": {k: round(v, 4) for k, v in c.measures.items()},
                "changed": c.changed,
                "p_value": c.p_value,
                "q_value": c.q_value,
                "senses_induced": len(c.senses),
            }
            for p, c in zip(pairs, changes)
        ],
    }


def table(result: Dict[str, Any]) -> str:
    """The scores as a small text table (one row per split)."""
    lines = ["split  lemmas  changed  " + "  ".join(f"{m:>6}" for m in MEASURES) + "  binary  majority"]
    for split in ("dev", "test", "all"):
        s = result["scores"][split]
        lines.append(
            f"{split:<5}  {s['lemmas']:>6}  {s['changed']:>7}  "
            + "  ".join(f"{s['spearman'][m]:>6.3f}" for m in MEASURES)
            + f"  {s['binary_accuracy']:>6.3f}  {s['majority_baseline']:>8.3f}"
        )
    return "\n".join(lines)
