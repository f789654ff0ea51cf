"""Per-item outcomes of an evaluation, and the paired comparison of two models on the same items.

An evaluation that scores test items one by one (WiC pairs, WSD instances, probe sentences) can
record which items it got right as a string of ``0``/``1`` characters in the data's order, compact
in a JSON report. Two such strings over the same items give a paired comparison: the difference in
accuracy with a percentile bootstrap interval that resamples items, so that what both models get
right or wrong together does not count as noise.
"""

from __future__ import annotations

from typing import Dict, Iterable, Sequence, Union

import numpy as np


def item_string(correct: Iterable[bool]) -> str:
    """``"1"`` for each item scored correct, ``"0"`` otherwise, in order."""
    return "".join("1" if bool(c) else "0" for c in correct)


def _as_array(items: str, name: str) -> np.ndarray:
    if not items or set(items) - {"0", "1"}:
        raise ValueError(f"{name}: expected a non-empty string of 0/1 item outcomes")
    return np.frombuffer(items.encode("ascii"), dtype=np.uint8) - ord("0")


def paired_difference(candidate: str, baseline: str, rounds: int = 4000, seed: int = 0, level: float = 0.95) -> Dict[str, float]:
    """Accuracy difference (candidate - baseline, in points) over the same items, with a paired
    bootstrap interval (items resampled with replacement, ``rounds`` times, fixed ``seed``) and the
    number of items on which the two disagree."""
    a, b = _as_array(candidate, "candidate"), _as_array(baseline, "baseline")
    if len(a) != len(b):
        raise ValueError(f"the two item strings cover different items ({len(a)} and {len(b)}): compare reports of the same test set")
    out = paired_mean_difference(a.astype(np.float64), b.astype(np.float64), rounds, seed, level)
    return {
        **{k: 100 * out[k] for k in ("difference", "low", "high")},
        "level": level,
        "items": out["items"],
        "disagreements": out["disagreements"],
    }


def paired_mean_difference(
    candidate: Union[Sequence[float], np.ndarray],
    baseline: Union[Sequence[float], np.ndarray],
    rounds: int = 4000,
    seed: int = 0,
    level: float = 0.95,
) -> Dict[str, float]:
    """The mean of ``candidate - baseline`` over the same items (scores per item, e.g. a word's ARI),
    with a paired percentile bootstrap interval (items resampled, ``rounds`` times, fixed ``seed``)
    and the number of items whose scores differ."""
    a, b = np.asarray(candidate, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(f"expected two equal, non-empty lists of per-item scores, got {a.shape} and {b.shape}")
    diff = a - b
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(rounds, len(diff)))].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return {
        "difference": float(diff.mean()),
        "low": float(low),
        "high": float(high),
        "level": level,
        "items": int(len(diff)),
        "disagreements": int(np.count_nonzero(diff)),
    }
