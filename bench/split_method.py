#!/usr/bin/env python3
"""How the induction cuts a word's occurrences, told the gold number of senses: its own cut against
spectral clustering of the same cosine similarities, on people's senses and on pseudowords.

    OMP_NUM_THREADS=1 python bench/split_method.py [--weights PATH] [--books BOOKS] [--json OUT]

For each representation (``--representations``, default: the default, substitutes alone, the
context alone) the occurrences' cosine distances are built as ``induce`` builds them
(:meth:`Inducer.representation`, :func:`cosine_distances`) and cut into the gold number of
senses by:

- ``own``: ``induce``'s cut (:func:`cut_senses` with ``n_senses`` fixed: 2-means on the
  occurrences' principal coordinates, top-down);
- ``spectral``: normalised spectral clustering of the similarities (``1 - distance``, negatives
  set to 0; scikit-learn's ``SpectralClustering``, affinity precomputed, seed 0);
- ``spectral-knn``: the same on the 10-nearest-neighbour graph of the distances.

The sets: the hand-labelled ``tests/data/senses`` sets (labelled, natural, registers: their
ambiguous words; people's senses) and, with ``--books``, the pseudoword check's five book pairs
(two frequent words merged into one token, 100 occurrences each: their classes differ). Mean ARI
against the gold senses per set, representation and cut.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from bench_common import REPO, Clock, machine, use_threads, write_results

sys.path.insert(0, str(REPO / "project" / "scripts"))

from labelled_senses import load_labelled  # noqa: E402

from spacy_elmo.induction.clustering import adjusted_rand, cosine_distances, cut_senses  # noqa: E402

SETS = ("labelled", "natural", "registers")
BOOK_PAIRS = (("time", "sir"), ("man", "come"), ("said", "hand"), ("like", "yes"), ("know", "little"))
CUTS = ("own", "spectral", "spectral-knn")


def cuts(distances: np.ndarray, k: int) -> Dict[str, np.ndarray]:
    """Each cut's labels of the occurrences whose cosine ``distances`` are given, into ``k`` senses."""
    from sklearn.cluster import SpectralClustering

    similarity = np.clip(1.0 - distances, 0.0, None)
    knn = SpectralClustering(k, affinity="precomputed_nearest_neighbors", n_neighbors=min(10, len(distances) - 1), random_state=0)
    return {
        "own": cut_senses(distances, n_senses=k),
        "spectral": SpectralClustering(k, affinity="precomputed", random_state=0).fit_predict(similarity),
        "spectral-knn": knn.fit_predict(distances),
    }


def score_words(inducer, words: Sequence[Tuple[str, Sequence[str], np.ndarray]]) -> Dict[str, float]:
    """Mean ARI of each cut over ``words`` (word, its forms, the gold sense of each stored occurrence)."""
    scores: Dict[str, List[float]] = {c: [] for c in CUTS}
    for word, forms, gold in words:
        store = inducer.stores[word]
        blocks = inducer.representation(store, sorted({word, *forms}))[3]
        for name, labels in cuts(cosine_distances(blocks), len(set(gold.tolist()))).items():
            scores[name].append(adjusted_rand(gold, labels))
    return {name: round(float(np.mean(v)), 4) for name, v in scores.items()}


def labelled_set(bilm, head, folder: Path, representation: str) -> Dict[str, float]:
    from spacy_elmo.induction.induce import Inducer, InductionSettings
    from spacy_elmo.induction.induced import Occurrence

    items = load_labelled(folder)
    inducer = Inducer(bilm, head, InductionSettings(representation=representation, min_occurrences=1))
    for item in items:
        tokens, positions = item.tokens()
        for i, (t, p) in enumerate(zip(tokens, positions)):
            inducer.add(item.word, t, p, Occurrence(" ".join(t), 0, 1, f"text {i}"))
    inducer.flush()
    words = []
    for item in items:
        gold = np.array([item.gold[int(o.source.split()[-1])] for o in inducer.stores[item.word].occurrences])
        words.append((item.word, item.forms, gold))
    return score_words(inducer, words)


def pseudowords(bilm, head, books: List[Path], representation: str) -> Dict[str, float]:
    from spacy_elmo.evaluation.wsi_check import add_pseudoword, word_occurrences
    from spacy_elmo.induction.induce import Inducer, InductionSettings

    kept = word_occurrences(books, [w for pair in BOOK_PAIRS for w in pair], 100, "en")
    inducer = Inducer(bilm, head, InductionSettings(representation=representation))
    words = []
    for pair in BOOK_PAIRS:
        n = min(len(kept[pair[0]]), len(kept[pair[1]]), 100)
        merged = "+".join(pair)
        sides = add_pseudoword(inducer, merged, [kept[w][:n] for w in pair])
        words.append((merged, [], np.array(sides)))
    inducer.flush()
    return score_words(inducer, words)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default=None, help="the biLM (default: the embedded default)")
    parser.add_argument("--books", type=Path, default=None, help="folder of the books (*.txt.gz): the first 10 by name")
    parser.add_argument("--representations", default="substitutes+context,substitutes,context")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    from spacy_elmo.hub.load import load_bilm
    from spacy_elmo.induction.induce import load_head

    bilm, head = load_bilm(args.weights), load_head(args.weights)
    books = sorted(args.books.rglob("*.txt.gz"))[:10] if args.books else []
    results: Dict[str, Dict[str, Dict[str, float]]] = {}
    with Clock() as clock:
        for representation in args.representations.split(","):
            row = {name: labelled_set(bilm, head, REPO / "tests" / "data" / "senses" / name, representation) for name in SETS}
            if books:
                row["pseudowords (books)"] = pseudowords(bilm, head, books, representation)
            results[representation] = row
            for name, scores in row.items():
                print(f"{representation:22s} {name:20s} " + "  ".join(f"{c} {v:.3f}" for c, v in scores.items()), flush=True)
    command = "OMP_NUM_THREADS=1 python bench/split_method.py" + (" --books BOOKS" if books else "")
    write_results(
        args.json,
        {"machine": machine(args.threads), "command": command, "weights": args.weights or "en_default", "results": results, "seconds": clock.seconds},
    )


if __name__ == "__main__":
    main()
