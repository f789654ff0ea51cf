#!/usr/bin/env python3
"""Calibrating the number-of-senses rule (:func:`spacy_elmo.induction.clustering.count_senses`) on data whose number of senses is known.

    OMP_NUM_THREADS=1 python bench/null_rule.py features --books BOOKS --modern FILE... --weights W --cache CACHE [--start 40 | --by-context]
    OMP_NUM_THREADS=1 python bench/null_rule.py score --cache CACHE --repeats 10 --json bench/results/null-rule.json

``features`` reads each corpus for its frequent content words and caches, per condition, the
features ``induce`` clusters (the TF-IDF substitute bags and the centred context vectors) of
``--per-word`` occurrences of each word of

- one word (true k = 1; the word is replaced by ``word+word``, as a pseudoword is): 8 a corpus,
- two frequent words merged into one token (k = 2; Schuetze's pseudowords, built as
  :mod:`spacy_elmo.evaluation.wsi_check` builds them),
- three merged (k = 3),

the words paired by frequency rank (the 24 from rank ``--start``) or, with ``--by-context``, the
pairs and triples of the 40 most frequent whose contexts differ most (pseudowords the features
can separate). ``score`` runs each rule (``--rules``, :func:`rule`) on those features (for the
representations ``substitutes``, ``context`` and ``substitutes+context``, at the full size and at
``--small`` occurrences per word) and on synthetic clouds (one Gaussian, t(3) coordinates, a
multivariate t with 3 degrees of freedom, an anisotropic cloud; 2- and 3-group mixtures at several
separations and shares; 40/100/300 points in 16 principal coordinates as in ``cut_senses``), and
reports per condition the share of draws whose k found is the true k, the mean k found, the mean
ARI, the ARI of k-means told the true k (what the features allow) and the seconds per draw.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from bench_common import machine, write_results
from scipy import sparse

from spacy_elmo.induction.clustering import (
    SplitTest,
    _two_means,
    adjusted_rand,
    cosine_distances,
    count_senses,
    embed_distances,
    split_score,
    unit_rows,
)

DIMS = 16  # principal coordinates, as cut_senses uses
SMALL = 40  # occurrences per word in the small real draws


# ------------------------------------------------------------------------------------------ features


def groups_of(words: Sequence[str], similarity: Optional[np.ndarray] = None) -> List[Tuple[str, ...]]:
    """Single words (k=1: the first 8), pairs (k=2: 6, or 8) and triples (k=3: 4) of ``words`` (frequent words, by rank).

    Without ``similarity``, by rank: pairs ``(i, i+12)`` and triples ``(i, i+8, i+16)`` of the first 24.
    With it (``[n, n]``, the cosines of the words' mean context vectors), the pairs and triples whose
    contexts differ most, greedily, each word used once: pseudowords the features can separate.
    """
    singles = [(w,) for w in words[:8]]
    if similarity is None:
        pairs = [(words[i], words[i + 12]) for i in range(6)]
        triples = [(words[i], words[i + 8], words[i + 16]) for i in range(4)]
        return singles + pairs + triples
    used: set = set()
    chosen: List[Tuple[int, ...]] = []
    for size, count in ((2, 8), (3, 4)):
        options = sorted(combinations(range(len(words)), size), key=lambda g: sum(similarity[a, b] for a, b in combinations(g, 2)))
        for option in options:
            if len(chosen) == (8 if size == 2 else 12):
                break
            if used.isdisjoint(option):
                chosen.append(option)
                used.update(option)
    return singles + [tuple(words[i] for i in g) for g in chosen]


def build_features(
    name: str, files: List[Path], weights: Optional[str], per_word: int, cache: Path, start: int = 0, by_context: bool = False
) -> None:
    import torch

    from spacy_elmo.evaluation.wsi_check import add_pseudoword, word_occurrences
    from spacy_elmo.hub.load import load_bilm
    from spacy_elmo.induction.induce import Inducer, InductionSettings, frequent_words, load_head

    torch.set_num_threads(1)
    started = time.perf_counter()
    n_words = 40 if by_context else 24
    words = list(frequent_words(files, start + n_words, min_count=per_word))[start:]
    if len(words) < n_words:
        raise SystemExit(f"{name}: only {len(words)} words seen {per_word} times; give more files or a smaller --per-word")
    kept = word_occurrences(files, words, per_word)
    words = [w for w in words if len(kept[w]) >= per_word]  # a word counted under another's inflection has too few
    print(f"{name}: {len(files)} files, words {words} ({time.perf_counter() - started:.0f} s)", flush=True)
    bilm, head = load_bilm(weights), load_head(weights)
    inducer = Inducer(bilm, head, InductionSettings(representation="substitutes+context"))
    similarity = None
    if by_context:
        means = np.stack([inducer.context_vectors([o for _, _, o in kept[w]], [w]).mean(0) for w in words])
        similarity = unit_rows(means) @ unit_rows(means).T
    groups = groups_of(words, similarity)
    print(f"{name}: groups {['+'.join(g) for g in groups]}", flush=True)
    truth: Dict[str, List[int]] = {}
    for group in groups:
        merged = "+".join(group * (2 if len(group) == 1 else 1))  # one word: "time+time", a pseudoword of one
        truth[merged] = add_pseudoword(inducer, merged, [kept[w][:per_word] for w in group])
    inducer.flush()
    out = cache / name
    out.mkdir(parents=True, exist_ok=True)
    for merged, sides in truth.items():
        store = inducer.stores[merged]
        bags = inducer._bags(inducer._substitutes(store))[0]
        forms = sorted({merged, *(o.text[o.start : o.end].lower() for o in store.occurrences)})
        context = inducer.context_vectors(store.occurrences, forms)
        sparse.save_npz(out / f"{merged}.bags.npz", bags)
        np.savez(out / f"{merged}.npz", context=unit_rows(context - context.mean(0, keepdims=True)), truth=np.array(sides))
    print(f"{name}: {len(truth)} conditions cached in {time.perf_counter() - started:.0f} s", flush=True)


# ------------------------------------------------------------------------------------------ data


@dataclass
class Draw:
    """One clustering problem: points (principal coordinates) and the true labels."""

    condition: str
    points: np.ndarray
    truth: np.ndarray


def real_draws(cache: Path, small: int) -> Iterator[Draw]:
    """Each cached word/pseudoword, per representation, at its full size and at ``small`` occurrences per word."""
    for corpus in sorted(p for p in cache.iterdir() if p.is_dir()):
        for path in sorted(corpus.glob("*.npz")):
            if path.name.endswith(".bags.npz"):
                continue
            merged = path.name[: -len(".npz")]
            data = np.load(path)
            truth, context = data["truth"], data["context"]
            bags = sparse.load_npz(corpus / f"{merged}.bags.npz")
            k = len(set(truth.tolist()))
            rng = np.random.default_rng(len(merged))
            subsets = {"full": np.arange(len(truth)), f"n{small}": np.sort(np.concatenate([
                rng.choice(np.flatnonzero(truth == side), small, replace=False) for side in range(k)]))}  # fmt: skip
            for size, rows in subsets.items():
                for representation, blocks in (("substitutes", [bags]), ("context", [context]), ("substitutes+context", [bags, context])):
                    distances = cosine_distances([b[rows] for b in blocks])
                    yield Draw(f"real/{corpus.name}/k{k}/{representation}/{size}", embed_distances(distances, DIMS), truth[rows])


def _spectrum(dims: int) -> np.ndarray:
    return np.sqrt(0.8 ** np.arange(dims))  # decaying scales, as principal coordinates decay


def synthetic_draws(repeats: int, seed: int = 0) -> Iterator[Draw]:
    """One-distribution clouds and 2-/3-group mixtures (unit within-group scale on the first axis)."""
    rng = np.random.default_rng(seed)
    scale = _spectrum(DIMS)
    for n in (40, 100, 300):
        for _ in range(repeats):
            yield Draw(f"syn/k1/gaussian/n{n}", rng.standard_normal((n, DIMS)) * scale, np.zeros(n, int))
            yield Draw(f"syn/k1/t3/n{n}", rng.standard_t(3, (n, DIMS)) * scale, np.zeros(n, int))
            t = rng.standard_normal((n, DIMS)) * scale / np.sqrt(rng.chisquare(3, (n, 1)) / 3)  # multivariate t, df 3
            yield Draw(f"syn/k1/mvt3/n{n}", t, np.zeros(n, int))
            aniso = rng.standard_normal((n, DIMS)) * np.sqrt(0.5 ** np.arange(DIMS))  # one long axis
            yield Draw(f"syn/k1/anisotropic/n{n}", aniso, np.zeros(n, int))
            for gap in (3.0, 4.0, 6.0):
                for share in (0.5, 0.8):
                    sizes = (int(round(share * n)), n - int(round(share * n)))
                    truth = np.repeat([0, 1], sizes)
                    x = rng.standard_normal((n, DIMS)) * scale
                    x[truth == 1, 0] += gap
                    yield Draw(f"syn/k2/gap{gap:g}/share{share:g}/n{n}", x, truth)
                truth = np.arange(n) % 3
                x = rng.standard_normal((n, DIMS)) * scale
                x[truth == 1, 0] += gap
                x[truth == 2, 1] += gap
                yield Draw(f"syn/k3/gap{gap:g}/n{n}", x, truth)
            truth = np.repeat([0, 1], (n // 2, n - n // 2))  # two heavy-tailed groups
            x = rng.standard_normal((n, DIMS)) * scale / np.sqrt(rng.chisquare(3, (n, 1)) / 3)
            x[truth == 1, 0] += 6.0
            yield Draw(f"syn/k2/mvt3-gap6/n{n}", x, truth)


# ------------------------------------------------------------------------------------------ scoring

Rule = Callable[[np.ndarray, int], np.ndarray]  # points, seed -> labels


def score(rule: Rule, draws: Sequence[Draw]) -> Dict[str, Dict[str, float]]:
    """Per condition: draws, share with the true k, mean k found, mean ARI, mean seconds per draw."""
    rows: Dict[str, List[Tuple[int, int, float, float, float]]] = {}
    for index, draw in enumerate(draws):
        started = time.perf_counter()
        labels = rule(draw.points, index)
        seconds = time.perf_counter() - started
        k_true, k_found = len(set(draw.truth.tolist())), len(set(labels.tolist()))
        at_true_k = adjusted_rand(draw.truth, count_senses(draw.points, n_senses=k_true, seed=index)) if k_true > 1 else 1.0
        rows.setdefault(draw.condition, []).append((k_true, k_found, adjusted_rand(draw.truth, labels), seconds, at_true_k))
    out = {}
    for condition, items in rows.items():
        a = np.array(items, dtype=float)
        out[condition] = {
            "draws": len(items),
            "right_k": round(float((a[:, 0] == a[:, 1]).mean()), 3),
            "mean_k": round(float(a[:, 1].mean()), 2),
            "ari": round(float(a[:, 2].mean()), 3) if a[0, 0] > 1 else None,
            "ari_at_true_k": round(float(a[:, 4].mean()), 3) if a[0, 0] > 1 else None,  # the features' ceiling
            "seconds": round(float(a[:, 3].mean()), 4),
        }
    return out


def summarise(table: Dict[str, Dict[str, float]]) -> Dict[str, float]:
    """Right-k share (and, where k > 1, the mean ARI and the ARI at the true k) pooled by family: synthetic k=1/2/3;
    real k=1/2/3 at full size and small, pseudowords paired by rank or by differing contexts."""
    pools: Dict[str, List[float]] = {}
    for condition, row in table.items():
        parts = condition.split("/")
        if parts[0] == "syn":
            key = f"syn/{parts[1]}"
        else:  # real/CORPUS/kK/REPRESENTATION/SIZE; pairs chosen by rank or by differing contexts
            key = f"real/{'context-paired' if parts[1].endswith('-context') else 'rank-paired'}/{parts[2]}/{parts[4]}"
        pools.setdefault(key, []).extend([row["right_k"]] * int(row["draws"]))
        if row["ari"] is not None:
            pools.setdefault(f"{key}/ari", []).extend([row["ari"]] * int(row["draws"]))
            pools.setdefault(f"{key}/ari_at_true_k", []).extend([row["ari_at_true_k"]] * int(row["draws"]))
    return {key: round(float(np.mean(v)), 3) for key, v in sorted(pools.items())}


def candidate_test(null: str, dims: int, n_null: int = 10) -> SplitTest:
    """A split test for :func:`count_senses`: 2-means on the ``dims`` leading principal axes, its
    within/total sum of squares against ``n_null`` draws of a null with the same covariance spectrum:

    - ``gaussian``: a Gaussian (SigClust; at 16 dims exactly :func:`split_score`, the default);
    - ``elliptical``: uniform directions with the data's own whitened radii (as heavy-tailed as the data);
    - ``within``: a Gaussian with the spectrum of the split's pooled within-cluster covariance
      (the split's own direction taken out of the null: SigClust's worry about the signal inflating it);
    - ``gainD``: ``gaussian``, and the split must also explain ``D`` more of the spread than the null's
      mean (an effect size, not only a significance);
    - ``stableA``: ``gaussian``, and the split must come back on 8 subsamples of 80% (mean ARI >= ``A``);
    - ``dip``: Hartigan's dip test on the projection onto the 2-means axis (:func:`dip_test`; ``dims`` unused).
    """
    gain = float(null[4:]) if null.startswith("gain") else None
    if null == "dip":
        return dip_test(n_null)
    if null.startswith("stable"):
        return stable_test(float(null[6:]))
    if dims == DIMS and null == "gaussian":
        return split_score

    def test(x: np.ndarray, rng: np.random.Generator) -> Tuple[np.ndarray, float]:
        centred = x - x.mean(0)
        values, axes = np.linalg.eigh(np.cov(centred, rowvar=False).reshape(x.shape[1], x.shape[1]))
        order = np.argsort(values)[-dims:]
        spectrum, coords = np.clip(values[order], 0.0, None), centred @ axes[:, order]
        total = float((coords**2).sum())
        labels, within = _two_means(coords, rng)
        if total <= 0:
            return labels, 0.0
        radii = None
        if null == "within":
            residual = np.vstack([coords[labels == c] - coords[labels == c].mean(0) for c in (0, 1) if (labels == c).any()])
            spectrum = np.clip(np.linalg.eigvalsh(np.cov(residual, rowvar=False).reshape(dims, dims)), 0.0, None)
        elif null == "elliptical":
            keep = spectrum > 1e-9 * spectrum.max()
            if keep.sum() < 2:
                return labels, 0.0
            spectrum, coords = spectrum[keep], coords[:, keep]
            radii = np.sqrt(((coords**2) / spectrum).sum(1))
        scores = []
        for _ in range(n_null):
            sample = rng.standard_normal((len(x), len(spectrum)))
            if radii is not None:
                sample *= rng.permutation(radii)[:, None] / np.maximum(np.linalg.norm(sample, axis=1, keepdims=True), 1e-12)
            sample = sample * np.sqrt(spectrum)
            sample -= sample.mean(0)
            scores.append(_two_means(sample, rng)[1] / max(float((sample**2).sum()), 1e-12))
        mean, spread = float(np.mean(scores)), max(float(np.std(scores)), 1e-3)
        if gain is not None and mean - within / total < gain:
            return labels, np.inf
        return labels, (within / total - mean) / spread

    return test


def stable_test(need: float, draws: int = 8) -> SplitTest:
    """:func:`split_score`, and a split kept only when 2-means on ``draws`` subsamples of 80% finds it again
    (mean ARI on the subsample >= ``need``)."""

    def test(x: np.ndarray, rng: np.random.Generator) -> Tuple[np.ndarray, float]:
        labels, z = split_score(x, rng)
        agreement = []
        for _ in range(draws):
            rows = rng.choice(len(x), int(0.8 * len(x)), replace=False)
            agreement.append(adjusted_rand(labels[rows], _two_means(x[rows] - x[rows].mean(0), rng)[0]))
        return labels, (z if float(np.mean(agreement)) >= need else np.inf)

    return test


def dip_test(n_null: int = 10) -> SplitTest:
    """Hartigan's dip of the projection onto the 2-means axis (``diptest`` from PyPI, not a dependency of
    the package), as a z-score against the same projection of ``n_null`` Gaussians with the data's spectrum."""
    try:
        import diptest
    except ImportError:
        raise SystemExit("the dip rule needs the diptest package: pip install diptest") from None

    def dip(x: np.ndarray, labels: np.ndarray) -> float:
        if labels.min() == labels.max():
            return 0.0
        axis = x[labels == 1].mean(0) - x[labels == 0].mean(0)
        return float(diptest.dipstat(x @ axis / max(float(np.linalg.norm(axis)), 1e-12)))

    def test(x: np.ndarray, rng: np.random.Generator) -> Tuple[np.ndarray, float]:
        centred = x - x.mean(0)
        labels, _ = _two_means(centred, rng)
        spectrum = np.clip(np.linalg.eigvalsh(np.cov(centred, rowvar=False).reshape(x.shape[1], x.shape[1])), 0.0, None)
        null = []
        for _ in range(n_null):
            sample = rng.standard_normal(centred.shape) * np.sqrt(spectrum)
            sample -= sample.mean(0)
            null.append(dip(sample, _two_means(sample, rng)[0]))
        return labels, -(dip(centred, labels) - float(np.mean(null))) / max(float(np.std(null)), 1e-6)  # a larger dip: below 0

    return test


def rule(spec: str) -> Rule:
    """``NULL-DIMS-SIGNIFICANCE[-MIN_SHARE]`` (e.g. ``gaussian-16-1``, the default): count_senses with that split test,
    threshold and smallest share (default 0.05)."""
    null, dims, significance, *share = spec.split("-")
    min_share = float(share[0]) if share else 0.05
    if null not in ("gaussian", "elliptical", "within", "dip") and not null.startswith(("gain", "stable")):
        raise SystemExit(f"unknown null {null!r} in {spec!r}: gaussian, elliptical, within, dip, gainD or stableA")
    test = candidate_test(null, int(dims))
    return lambda x, seed: count_senses(x, seed=seed, significance=float(significance), min_share=min_share, test=test)


RULES = [  # the default first
    "gaussian-16-1", "gaussian-16-0.5", "gaussian-16-2", "gaussian-16-1-0.1", "gaussian-4-1", "gaussian-2-1",
    "elliptical-16-1", "elliptical-4-1", "within-16-1", "gain0.02-16-0.5", "stable0.8-16-1",
]  # fmt: skip


def markdown(rules: Dict[str, Dict[str, object]], small: int = SMALL) -> str:
    """One row per rule: right-k shares (and mean ARI) per family, as docs/senses.md shows them."""

    def cell(summary: Dict[str, float], key: str, ari: bool = True) -> str:
        text = f"{summary[key]:.2f}"
        return text + (f" ({summary[key + '/ari']:.2f})" if ari else "")

    head = (
        f"| rule | one cloud -> 1 | two -> 2 (ARI) | three -> 3 (ARI) | one word -> 1, 100 / {small} occ. "
        "| rank pairs -> 2 (ARI) | context pairs -> 2 (ARI) | triples -> 3 (ARI), rank / context |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    for name, result in rules.items():
        m: Dict[str, float] = result["summary"]  # type: ignore[assignment]
        rank, ctx = "real/rank-paired", "real/context-paired"
        one = [(m[f"{rank}/k1/{size}"] * 8 + m[f"{ctx}/k1/{size}"] * 8) / 16 for size in ("full", f"n{small}")]  # 8 words each
        rows.append(
            f"| `{name}` | {cell(m, 'syn/k1', False)} | {cell(m, 'syn/k2')} | {cell(m, 'syn/k3')} | {one[0]:.2f} / {one[1]:.2f} "
            f"| {cell(m, rank + '/k2/full')} | {cell(m, ctx + '/k2/full')} | {cell(m, rank + '/k3/full')} / {cell(m, ctx + '/k3/full')} |"
        )
    m = next(iter(rules.values()))["summary"]  # type: ignore[assignment]
    ceiling = (
        f"| k-means at the true k (the features' ceiling) | | ({m['syn/k2/ari_at_true_k']:.2f}) | ({m['syn/k3/ari_at_true_k']:.2f}) | "
        f"| ({m['real/rank-paired/k2/full/ari_at_true_k']:.2f}) | ({m['real/context-paired/k2/full/ari_at_true_k']:.2f}) "
        f"| ({m['real/rank-paired/k3/full/ari_at_true_k']:.2f}) / ({m['real/context-paired/k3/full/ari_at_true_k']:.2f}) |"
    )
    return head + "\n".join(rows + [ceiling]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    feats = sub.add_parser("features", help="cache the features of words and pseudowords")
    feats.add_argument("--books", type=Path, default=None, help="folder of books (*.txt.gz); the first --max-files by name")
    feats.add_argument("--max-files", type=int, default=10)
    feats.add_argument("--modern", type=Path, nargs="*", default=[], help="files of modern text (*.txt.gz)")
    feats.add_argument("--weights", default=None)
    feats.add_argument("--per-word", type=int, default=100)
    feats.add_argument("--cache", type=Path, required=True)
    feats.add_argument("--start", type=int, default=0, help="skip this many of the most frequent words (0: the top 24)")
    feats.add_argument("--by-context", action="store_true", help="pair the words whose contexts differ most (of 40 words)")
    scoring = sub.add_parser("score", help="score the rules")
    scoring.add_argument("--cache", type=Path, default=None)
    scoring.add_argument("--rules", default=",".join(RULES))
    scoring.add_argument("--repeats", type=int, default=20, help="synthetic draws per condition")
    scoring.add_argument("--small", type=int, default=SMALL, help="occurrences per word in the small real draws")
    scoring.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.command == "features":
        if args.books:
            files = sorted(args.books.glob("*.txt.gz"))[: args.max_files]
            name = f"books-{args.start}" + ("-context" if args.by_context else "")
            build_features(name, files, args.weights, args.per_word, args.cache, args.start, args.by_context)
        if args.modern:
            name = f"modern-{args.start}" + ("-context" if args.by_context else "")
            build_features(name, list(args.modern), args.weights, args.per_word, args.cache, args.start, args.by_context)
        return
    draws = list(synthetic_draws(args.repeats))
    if args.cache is not None:
        draws += list(real_draws(args.cache, args.small))
    result: Dict[str, object] = {
        "machine": machine(threads=1),
        "features": None
        if args.cache is None
        else "OMP_NUM_THREADS=1 python bench/null_rule.py features --books BOOKS --modern WIKIPEDIA WIKINEWS --weights W"
        " --cache CACHE [--start 40 | --by-context] (BOOKS: the books folder, first 10 by name; WIKIPEDIA, WIKINEWS: the"
        " modern corpus' wikipedia.valid.txt.gz and wikinews.valid.txt.gz; W: the v2 candidate, step 17,000)",
        "command": "OMP_NUM_THREADS=1 python bench/null_rule.py score"
        + (" --cache CACHE" if args.cache is not None else "")
        + f" --repeats {args.repeats} --small {args.small}"
        + (f" --rules {args.rules}" if args.rules != ",".join(RULES) else ""),
        "rules": {},
    }
    names = args.rules.split(",")
    for name in names:
        table = score(rule(name), draws)
        summary = summarise(table)
        print(name, json.dumps(summary))
        result["rules"][name] = {"summary": summary}  # type: ignore[index]
        if name == names[0]:  # each condition, for the first rule (the default)
            result["rules"][name]["conditions"] = table  # type: ignore[index]
    table = markdown(result["rules"], args.small) if args.cache is not None else ""  # type: ignore[arg-type]
    # the table, its command above it, beside the JSON and printed (only printed without --json)
    write_results(args.json, result, (f"`{result['command']}`\n\n{table}" if args.json else table) if table else None)


if __name__ == "__main__":
    main()
