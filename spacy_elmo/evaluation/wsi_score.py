"""Scoring word sense induction against gold senses: paired F-score, V-measure, their geometric mean.

The unsupervised measures of SemEval-2010 Task 14 (Manandhar et al. 2010), computed per target
word and averaged over the words weighted by their number of instances (as the task's scorers
do; this reproduces the organisers' baseline figures to their rounding):

- **paired F-score** (F-S): the instance pairs that share a cluster against those that share a
  gold sense (precision, recall, their harmonic mean). A cluster of one instance contributes the
  instance paired with itself, as the task's scorer counts it (so one cluster per instance
  scores just above 0 rather than an undefined 0/0).
- **V-measure** (V-M): the harmonic mean of homogeneity (each cluster holds one sense) and
  completeness (each sense sits in one cluster), from the conditional entropies of the
  cluster-by-sense contingency table.

The two pull in opposite directions: one cluster per word maximises F-S (63.4 on the task's
test set) with V-M 0; one cluster per instance maximises V-M (31.7) with F-S near 0. Report
both, their geometric mean (AVG), and the clusters per word.

A key file has one line per instance: ``WORD INSTANCE_ID LABEL[/WEIGHT] [LABEL[/WEIGHT] ...]``;
a graded instance counts for its heaviest label (the first among equals).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Tuple, Union

import numpy as np

from ..gzipped import open_read

Key = Dict[str, Dict[str, str]]  # word -> instance id -> label


def read_key(path: Union[str, Path]) -> Key:
    """A key file (or a gzipped one) as ``{word: {instance: label}}`` (the heaviest label of a graded line); one line names a bad line."""
    path = Path(path)
    out: Key = defaultdict(dict)
    with open_read(path, "rt") as fh:
        for number, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) < 3:
                raise ValueError(f"{path}, line {number}: expected 'WORD INSTANCE LABEL[/WEIGHT] ...', got {line.strip()!r}")
            word, instance, labels = parts[0], parts[1], parts[2:]
            best, best_weight = labels[0], -math.inf
            for item in labels:
                label, _, weight = item.rpartition("/") if "/" in item else (item, "", "1")
                try:
                    value = float(weight)
                except ValueError:
                    raise ValueError(f"{path}, line {number}: weight {weight!r} of {label!r} is not a number") from None
                if value > best_weight:
                    best, best_weight = label, value
            out[word][instance] = best
    return dict(out)


def _pairs(sizes: Iterable[int]) -> int:
    return sum(n * (n - 1) // 2 if n > 1 else 1 for n in sizes)


def paired_fscore(clusters: Mapping[str, str], gold: Mapping[str, str]) -> float:
    """Paired F-score of one word's clustering (instance -> cluster) against its gold (instance -> sense)."""
    shared = [i for i in gold if i in clusters]
    system = Counter(clusters[i] for i in shared)
    truth = Counter(gold[i] for i in shared)
    both = Counter((clusters[i], gold[i]) for i in shared)
    # a pair counts as correct when both members share the cluster and the sense; singletons pair with themselves
    correct = sum(n * (n - 1) // 2 if n > 1 else (1 if system[c] == 1 and truth[g] == 1 else 0) for (c, g), n in both.items())
    n_system, n_gold = _pairs(system.values()), _pairs(truth.values())
    if not correct or not n_system or not n_gold:
        return 0.0
    precision, recall = correct / n_system, correct / n_gold
    return 2 * precision * recall / (precision + recall)


def _entropy(counts: np.ndarray) -> float:
    total = counts.sum()
    p = counts[counts > 0] / total
    return float(-(p * np.log(p)).sum())


def v_measure(clusters: Mapping[str, str], gold: Mapping[str, str]) -> float:
    """V-measure of one word's clustering against its gold senses (homogeneity and completeness, harmonic mean)."""
    shared = [i for i in gold if i in clusters]
    if not shared:
        return 0.0
    cluster_ids = {c: k for k, c in enumerate(sorted({clusters[i] for i in shared}))}
    sense_ids = {s: k for k, s in enumerate(sorted({gold[i] for i in shared}))}
    table = np.zeros((len(cluster_ids), len(sense_ids)))
    for i in shared:
        table[cluster_ids[clusters[i]], sense_ids[gold[i]]] += 1
    n = table.sum()
    h_sense, h_cluster = _entropy(table.sum(0)), _entropy(table.sum(1))
    nz = table > 0
    joint = table[nz] / n
    h_sense_given_cluster = float(-(joint * np.log(table[nz] / table.sum(1, keepdims=True).repeat(table.shape[1], 1)[nz])).sum())
    h_cluster_given_sense = float(-(joint * np.log(table[nz] / table.sum(0, keepdims=True).repeat(table.shape[0], 0)[nz])).sum())
    homogeneity = 1.0 if h_sense == 0 else 1 - h_sense_given_cluster / h_sense
    completeness = 1.0 if h_cluster == 0 else 1 - h_cluster_given_sense / h_cluster
    if homogeneity + completeness == 0:
        return 0.0
    return 2 * homogeneity * completeness / (homogeneity + completeness)


@dataclass
class WsiScore:
    """F-S and V-M in percent (averaged over words, weighted by their instances), AVG their geometric mean, and the clusters per word."""

    fscore: float
    vmeasure: float
    clusters_per_word: float
    n_words: int
    n_instances: int
    n_missing: int  # gold instances the system left out (each counts as a cluster of its own)
    per_word: Dict[str, Tuple[float, float, int]] = field(default_factory=dict)  # word -> (F-S, V-M, clusters)

    @property
    def avg(self) -> float:
        return math.sqrt(max(self.fscore, 0.0) * max(self.vmeasure, 0.0))

    def as_dict(self) -> Dict[str, float]:
        return {
            "F-S": round(self.fscore, 3),
            "V-M": round(self.vmeasure, 3),
            "AVG": round(self.avg, 3),
            "clusters_per_word": round(self.clusters_per_word, 2),
            "words": self.n_words,
            "instances": self.n_instances,
            "missing": self.n_missing,
        }


def score(system: Key, gold: Key, words: Iterable[str] = ()) -> WsiScore:
    """Score a system key against the gold key over ``words`` (default: every gold word).

    A gold instance the system did not label is put in a cluster of its own, as the task's
    scorer does, so leaving instances out is never rewarded.
    """
    chosen: List[str] = list(words) or sorted(gold)
    unknown = [w for w in chosen if w not in gold]
    if unknown:
        raise ValueError(f"{len(unknown)} words are not in the gold key: {', '.join(unknown[:5])}")
    per_word: Dict[str, Tuple[float, float, int]] = {}
    missing = instances = 0
    for word in chosen:
        truth = gold[word]
        labels = dict(system.get(word, {}))
        for i in truth:
            if i not in labels:
                labels[i] = f"\0missing:{i}"
                missing += 1
        instances += len(truth)
        per_word[word] = (100 * paired_fscore(labels, truth), 100 * v_measure(labels, truth), len({labels[i] for i in truth}))
    n = len(chosen)
    size = {word: len(gold[word]) for word in chosen}
    return WsiScore(
        fscore=sum(per_word[w][0] * size[w] for w in chosen) / max(instances, 1),
        vmeasure=sum(per_word[w][1] * size[w] for w in chosen) / max(instances, 1),
        clusters_per_word=sum(k for _, _, k in per_word.values()) / n,
        n_words=n,
        n_instances=instances,
        n_missing=missing,
        per_word=per_word,
    )


def write_key(path: Union[str, Path], labels: Mapping[str, Mapping[str, Union[str, Mapping[str, float]]]]) -> None:
    """Write a key: ``{word: {instance: label or {label: weight}}}``, graded labels as ``label/weight``."""
    lines = []
    for word, instances in labels.items():
        for instance, label in instances.items():
            if isinstance(label, str):
                lines.append(f"{word} {instance} {label}")
            else:
                graded = " ".join(f"{name}/{weight:.4f}" for name, weight in sorted(label.items(), key=lambda kv: -kv[1]) if weight > 0)
                lines.append(f"{word} {instance} {graded}")
    from ..files import write_atomic

    write_atomic(path, lambda fh: fh.write(("\n".join(lines) + "\n").encode("utf-8")))
