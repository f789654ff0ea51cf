#!/usr/bin/env python3
"""Which two-sample test should `change`'s binary call be? Several statistics, each a permutation
test with Benjamini-Hochberg across the words of one run, on words whose truth is known.

    OMP_NUM_THREADS=1 python bench/change_tests.py collect --data DATA/wsd_raganato --cache CACHE.npy
    python bench/change_tests.py score --cache CACHE.npy [--json bench/results/change-tests.json]

``collect`` reads every word's occurrences once, as ``change`` does (its default vectors, the
senses induced jointly), and keeps their vectors; two sources:

- ``synthetic``: the SemCor benchmark of ``change-eval`` (the dev half chooses, the test half
  reports), truth by SemEval-2020's sense-count rule; one run holds all the lemmas of a half;
- ``flip``: the hand-labelled sets of ``bench/change_flip.py`` (a two-sense word's senses 14/4
  against 4/14: changed; halved: not changed; controls halved: not changed), one run per set,
  draw and kind.

``score`` computes each statistic's permutation p-value (999 shuffles, the same shuffles for every
statistic of a word, so that the minimum-p combinations are exact permutation tests too), adjusts
them per run, and reports the call's accuracy, and how often it calls a changed and an unchanged
word changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np
from bench_common import REPO, machine, use_threads, write_results

sys.path.insert(0, str(REPO / "project" / "scripts"))
sys.path.insert(0, str(REPO / "bench"))


def collect_synthetic(data: Path, bilm: Any, head: Any) -> List[Dict[str, Any]]:
    from spacy_elmo.change.detect import ChangeSettings, compare_samples, occurrence_vectors
    from spacy_elmo.change.synthetic import build_pairs
    from spacy_elmo.evaluation.wsd_data import load_corpus

    settings = ChangeSettings(n_permutations=1, n_resamples=1)
    sentences, gold = load_corpus(data, "semcor")
    pairs = build_pairs(sentences, gold, size=50, min_per_sense=20, seed=0)
    changes = compare_samples({p.lemma: (p.a, p.b) for p in pairs}, bilm, head, settings, progress=True)
    rows = []
    for p, c in zip(pairs, changes):
        rows.append(
            {
                "source": "synthetic",
                "run": f"synthetic-{p.split}",
                "word": p.lemma,
                "kind": p.design,
                "truth": bool(p.truth_changed(settings.rule)),
                "vectors": occurrence_vectors(c.word_senses, settings.vectors),
                "senses": np.asarray(c.word_senses.vectors, np.float32),
                "n_a": len(p.a),
            }
        )
    return rows


def collect_flips(bilm: Any, head: Any, draws: int) -> List[Dict[str, Any]]:
    from change_flip import SETS, deal
    from labelled_senses import load_labelled

    from spacy_elmo.change import ChangeSettings, detect_change
    from spacy_elmo.change.detect import occurrence_vectors

    rows = []
    for name, folder in SETS.items():
        ambiguous = [w for w in load_labelled(folder, kind="ambiguous") if w.n_senses == 2]
        controls = load_labelled(folder, kind="controls")
        for draw in range(draws):
            for kind in ("flip", "stable"):
                seed = 1000 * draw + (kind == "stable")
                items = {w.word: (w, kind) for w in ambiguous}
                items.update({w.word: (w, "control") for w in controls})
                rng = np.random.default_rng(seed)
                corpus_a: List[str] = []
                corpus_b: List[str] = []
                for word, (item, k) in items.items():
                    a, b = deal(item, k, rng)
                    corpus_a += [t for _, t in a]
                    corpus_b += [t for _, t in b]
                words = {word: list(item.forms) for word, (item, _k) in items.items()}
                settings = ChangeSettings(min_occurrences=5, seed=seed, n_permutations=1, n_resamples=1)
                report = detect_change(corpus_a, corpus_b, words, names=("A", "B"), bilm=bilm, head=head, settings=settings, progress=False)
                for change in report.words:
                    if change.word_senses is None or not change.measured:
                        continue
                    rows.append(
                        {
                            "source": name,
                            "run": f"{name}-{draw}-{kind}",
                            "word": change.word,
                            "kind": items[change.word][1],
                            "truth": items[change.word][1] == "flip",
                            "vectors": occurrence_vectors(change.word_senses, settings.vectors),
                            "senses": np.asarray(change.word_senses.vectors, np.float32),
                            "n_a": change.n_a,
                        }
                    )
                print(f"{name} draw {draw} {kind}: {len(rows)} words so far", flush=True)
    return rows


# --------------------------------------------------------------------------------------- statistics


def _whiten(x: np.ndarray, dims: int) -> np.ndarray:
    from spacy_elmo.change.measures import unit

    u = unit(x)
    c = u - u.mean(0)
    _, s, vt = np.linalg.svd(c, full_matrices=False)
    s = s / np.sqrt(len(u))
    r = int(min(dims, (s > 1e-9 * s[0]).sum()))
    return c @ vt[:r].T / s[:r]


def _pair_means(m: np.ndarray, labels: np.ndarray, diagonal: bool) -> np.ndarray:
    """``[P]``: mean m[i, j] over pairs across the two corpora, less the means within each (over
    distinct pairs when ``diagonal`` is False), for each row of 0/1 ``labels`` ``[P, n]``."""
    b = labels.astype(np.float64)
    a = 1.0 - b
    na, nb = a.sum(1), b.sum(1)
    diag = np.diag(m)
    ma, mb = a @ m, b @ m
    saa = (ma * a).sum(1) - a @ diag
    sbb = (mb * b).sum(1) - b @ diag
    sab = (ma * b).sum(1)
    return 2 * sab / (na * nb) - saa / (na * (na - 1)) - sbb / (nb * (nb - 1))


def mean_shift(dims: int) -> Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """MAHAL on ``dims`` pooled axes: the squared distance of the two corpora's means (unbiased form)."""

    def prepare(x: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        z = _whiten(x, dims)
        gram = z @ z.T
        return lambda labels: -_pair_means(gram, labels, False)

    return prepare


def energy(dims: int) -> Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """Energy distance (Szekely & Rizzo) in ``dims`` whitened axes (0: the unit vectors themselves)."""

    def prepare(x: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        from spacy_elmo.change.measures import unit

        z = unit(x) if dims == 0 else _whiten(x, dims)
        sq = (z * z).sum(1)
        d = np.sqrt(np.maximum(sq[:, None] + sq[None] - 2 * z @ z.T, 0))
        return lambda labels: _pair_means(d, labels, False)

    return prepare


def neighbours(k: int, dims: int) -> Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """Schilling/Henze: the share of each occurrence's ``k`` nearest neighbours (in ``dims`` whitened
    axes; 0: cosine of the unit vectors) from its own corpus, each corpus weighted equally."""

    def prepare(x: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        from spacy_elmo.change.measures import unit

        z = unit(x) if dims == 0 else _whiten(x, dims)
        sq = (z * z).sum(1)
        d = sq[:, None] + sq[None] - 2 * z @ z.T
        np.fill_diagonal(d, np.inf)
        nn = np.argsort(d, axis=1, kind="stable")[:, :k]

        def stat(labels: np.ndarray) -> np.ndarray:
            same = (labels[:, nn] == labels[:, :, None]).mean(2)
            b = labels.astype(np.float64)
            return (same * (1 - b)).sum(1) / (1 - b).sum(1) + (same * b).sum(1) / b.sum(1)

        return stat

    return prepare


def clusters_table(k: int, dims: int) -> Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """Label-blind ``k``-means (in ``dims`` whitened axes) of the pooled occurrences, then the
    chi-square statistic of the corpus-by-cluster table: under the null the clusters, made without
    the corpus labels, are fixed and the labels exchangeable, so the permutation test is exact."""

    def prepare(x: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        z = _whiten(x, dims)
        rng = np.random.default_rng(0)
        best, best_cost = None, np.inf
        for _ in range(10):
            centres = z[rng.choice(len(z), k, replace=False)]
            for _ in range(50):
                assign = ((z[:, None] - centres[None]) ** 2).sum(2).argmin(1)
                new = np.array([z[assign == j].mean(0) if (assign == j).any() else centres[j] for j in range(k)])
                if np.allclose(new, centres):
                    break
                centres = new
            cost = ((z - centres[assign]) ** 2).sum()
            if cost < best_cost:
                best, best_cost = assign, cost
        onehot = np.eye(k)[best]  # [n, k]

        def stat(labels: np.ndarray) -> np.ndarray:
            b = labels.astype(np.float64)
            in_b = b @ onehot  # [P, k]
            size = onehot.sum(0)
            nb = b.sum(1, keepdims=True)
            n = len(best)
            expected_b = nb * size / n
            expected_a = (n - nb) * size / n
            in_a = size - in_b
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = (in_b - expected_b) ** 2 / expected_b + (in_a - expected_a) ** 2 / expected_a
            return np.nansum(terms, 1)

        return stat

    return prepare


STATISTICS: Dict[str, Callable[[np.ndarray], Callable[[np.ndarray], float]]] = {
    "mahal10": mean_shift(10),
    "mahal5": mean_shift(5),
    "mahal3": mean_shift(3),
    "mahal2": mean_shift(2),
    "mahal1": mean_shift(1),
    "km2-w2": clusters_table(2, 2),
    "km2-w3": clusters_table(2, 3),
    "km3-w3": clusters_table(3, 3),
    "km2-w10": clusters_table(2, 10),
    "energy-unit": energy(0),
    "energy10": energy(10),
    "knn5-unit": neighbours(5, 0),
    "knn10-unit": neighbours(10, 0),
    "knn5-w10": neighbours(5, 10),
}
COMBINED = {"min(mahal10,km2-w2)": ("mahal10", "km2-w2"), "min(mahal3,km2-w2)": ("mahal3", "km2-w2"), "min(mahal10,mahal2)": ("mahal10", "mahal2"), "min(mahal10,knn5-unit)": ("mahal10", "knn5-unit"),
            "min(mahal10,energy-unit)": ("mahal10", "energy-unit"), "min(mahal10,mahal2,knn5-unit)": ("mahal10", "mahal2", "knn5-unit")}  # fmt: skip


KINDS = ("vectors", "senses")
CROSS = {"min(vectors:mahal10,senses:energy-unit)": ("vectors:mahal10", "senses:energy-unit"),
         "min(vectors:mahal10,senses:knn10-unit)": ("vectors:mahal10", "senses:knn10-unit"),
         "min(vectors:mahal10,senses:mahal2)": ("vectors:mahal10", "senses:mahal2"),
         "min(senses:energy-unit,senses:knn10-unit)": ("senses:energy-unit", "senses:knn10-unit")}  # fmt: skip


def names() -> List[str]:
    return [f"{kind}:{name}" for kind in KINDS for name in [*STATISTICS, *COMBINED]] + list(CROSS)


def pvalues(row: Dict[str, Any], n_permutations: int, seed: int) -> Dict[str, float]:
    """Every statistic's permutation p-value on each kind of vectors, and the minimum-p combinations
    (calibrated by the same shuffles, so exact permutation tests too)."""
    n_a = row["n_a"]
    labels = np.array([0] * n_a + [1] * (len(row["vectors"]) - n_a))
    rng = np.random.default_rng(seed)
    shuffles = np.stack([labels] + [rng.permutation(labels) for _ in range(n_permutations)])
    ranks = {}
    for kind in KINDS:
        x = np.asarray(row[kind], np.float64)
        for name, prepare in STATISTICS.items():
            v = prepare(x)(shuffles)
            # each shuffle's p-value (its rank among all shuffles, the observed one included)
            ranks[f"{kind}:{name}"] = (v[None, :] >= v[:, None] - 1e-12 * np.abs(v[:, None]).clip(1)).sum(1) / len(v)
        for name, parts in COMBINED.items():
            m = np.min([ranks[f"{kind}:{p}"] for p in parts], axis=0)
            ranks[f"{kind}:{name}"] = (m[None, :] <= m[:, None]).sum(1) / len(m)  # not used further
    out = {name: float(r[0]) for name, r in ranks.items()}
    for name, parts in CROSS.items():
        m = np.min([ranks[p] for p in parts], axis=0)
        out[name] = float((m <= m[0]).sum() / len(m))
    return out


def bh(p: List[float]) -> np.ndarray:
    p = np.asarray(p)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * len(p) / np.arange(1, len(p) + 1)
    q = np.empty(len(p))
    q[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1)
    return q


def score(rows: List[Dict[str, Any]], alpha: float) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    groups = {
        "synthetic dev": [r for r in rows if r["run"] == "synthetic-dev"],
        "synthetic test": [r for r in rows if r["run"] == "synthetic-test"],
        **{src: [r for r in rows if r["source"] == src] for src in ("labelled", "natural", "registers")},
    }
    for group, members in groups.items():
        if not members:
            continue
        out[group] = {}
        for name in names():
            calls, truth = [], []
            for run in sorted({r["run"] for r in members}):
                rr = [r for r in members if r["run"] == run]
                q = bh([r["p"][name] for r in rr])
                calls += list(q <= alpha)
                truth += [r["truth"] for r in rr]
            calls, truth = np.array(calls), np.array(truth)
            out[group][name] = {
                "accuracy": round(float((calls == truth).mean()), 3),
                "changed_called": round(float(calls[truth].mean()), 3) if truth.any() else None,
                "unchanged_called": round(float(calls[~truth].mean()), 3) if (~truth).any() else None,
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=("collect", "score"))
    parser.add_argument("--data", type=Path, help="the WSD framework's folder (collect; without it, the flip sets only)")
    parser.add_argument("--weights", default=None)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--permutations", type=int, default=999)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    use_threads(1)
    if args.step == "collect":
        from spacy_elmo.hub.load import load_bilm
        from spacy_elmo.induction.induce import load_head

        bilm, head = load_bilm(args.weights), load_head(args.weights)
        rows = collect_flips(bilm, head, args.draws)
        if args.data:
            rows += collect_synthetic(args.data, bilm, head)
        np.save(args.cache, np.array(rows, dtype=object), allow_pickle=True)
        return
    rows = list(np.load(args.cache, allow_pickle=True))
    for i, r in enumerate(rows):
        r["p"] = pvalues(r, args.permutations, i)
    result = score(rows, args.alpha)
    lines = ["| statistic | " + " | ".join(result) + " |", "| --- |" + " ---: |" * len(result)]
    for name in names():
        cells = [f"{g[name]['accuracy']:.3f} ({g[name]['changed_called']}/{g[name]['unchanged_called']})" for g in result.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    if args.json:
        write_results(args.json, {"machine": machine(1), "alpha": args.alpha, "permutations": args.permutations, "scores": result}, table)


if __name__ == "__main__":
    main()
