#!/usr/bin/env python3
"""Sense induction on the hand-labelled sense set (tests/data/senses/labelled): how well a model's senses agree with a person's.

    OMP_NUM_THREADS=1 python bench/sense_set.py [--weights PATH] [--json bench/results/sense-set.json]

Measurements per word and on average over the set's 8 ambiguous words (2 or 3 senses each, 21
hand-written sentences per sense); its 5 one-sense control words (42 sentences each) are read by
induction only:

- **vectors, k fixed at gold**: each occurrence's ELMo vector under a mix (the average of the
  two LSTM layers, the top layer, layer 1, and the context-free layer 0 as the floor), clustered
  into the gold number of senses by k-means (unit vectors, best of 10 seeded starts by inertia)
  and by average linkage on cosine distance; mean adjusted Rand index (ARI) against gold. This
  is what a model's vectors can do when told the number of senses (issue 31's ship rule reads
  the k-means ARI of the average mix).
- **features**: which representation carries the context rather than the word's form (k-means
  at gold on each; ARI against the senses and against the surface forms, ``cell``/``cells``).
- **induction**: ``induce`` with its default settings (its own number of senses): mean ARI,
  senses per word, and the share of the senses holding >= 15% of a word's occurrences that are
  named by a word a person accepts for their majority gold sense (``names.json``, written before
  any output was looked at); and the number-of-senses rule's two promises: the share of the
  controls given exactly one sense, and the share of the ambiguous words given two or more.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch
from bench_common import REPO, Clock, machine, use_threads, write_results
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.cluster.vq import kmeans2

sys.path.insert(0, str(REPO / "project" / "scripts"))

from labelled_senses import LABELLED, load_labelled, score_word, summary  # noqa: E402

from spacy_elmo.induction.clustering import adjusted_rand, unit_rows  # noqa: E402


def mixes(n_layers: int) -> Dict[str, Tuple[float, ...]]:
    """The mixes compared, for a biLM of ``n_layers`` layers: the average of the contextual layers, the
    top one, the first contextual one and the token layer."""
    one = lambda i: tuple(1.0 if j == i else 0.0 for j in range(n_layers))  # noqa: E731
    return {"average": (0.0,) + (1.0,) * (n_layers - 1), "top": one(n_layers - 1), "layer1": one(1), "layer0": one(0)}


def kmeans_labels(vectors: np.ndarray, k: int, restarts: int = 10) -> np.ndarray:
    """k-means on unit rows: the best of ``restarts`` seeded k-means++ runs (lowest inertia)."""
    x = unit_rows(vectors).astype(np.float64)
    best, best_inertia = np.zeros(len(x), dtype=np.int64), np.inf
    for seed in range(restarts):
        centroids, labels = kmeans2(x, k, minit="++", seed=seed)
        inertia = float(((x - centroids[labels]) ** 2).sum())
        if inertia < best_inertia:
            best, best_inertia = labels, inertia
    return best


def average_linkage_labels(vectors: np.ndarray, k: int) -> np.ndarray:
    x = unit_rows(vectors).astype(np.float64)
    return fcluster(linkage(x, method="average", metric="cosine"), k, criterion="maxclust")


def fixed_k(items, bilm) -> Dict[str, Dict[str, Dict[str, float]]]:
    """Per mix and clustering: the ARI of each word with k fixed at its gold number of senses."""
    from spacy_elmo.induction.substitutes import lm_states

    out: Dict[str, Dict[str, Dict[str, float]]] = {}
    for mix_name, mix in mixes(bilm.n_output_layers).items():
        per: Dict[str, Dict[str, float]] = {"kmeans": {}, "average_linkage": {}}
        for item in items:
            tokens, positions = item.tokens()
            with torch.inference_mode():
                vectors = np.concatenate(
                    [lm_states(bilm, tokens[i : i + 32], positions[i : i + 32], mix).vectors for i in range(0, len(tokens), 32)]
                )
            per["kmeans"][item.word] = adjusted_rand(item.gold, kmeans_labels(vectors, item.n_senses))
            per["average_linkage"][item.word] = adjusted_rand(item.gold, average_linkage_labels(vectors, item.n_senses))
        out[mix_name] = per
    return out


def features(items, bilm, head) -> Dict[str, Dict[str, float]]:
    """Which features carry the context, not the word's form: per feature, the mean ARI (k-means, k at gold)
    against the gold senses and against the occurrences' surface forms (``cell`` / ``cells`` / ``Cell``),
    and each word's ARI against the gold senses."""
    from spacy_elmo.bilm.characters import TokenBatch
    from spacy_elmo.induction.clustering import remove_form
    from spacy_elmo.induction.induce import Inducer, InductionSettings
    from spacy_elmo.induction.induced import Occurrence

    proj = bilm.config.projection_dim
    sums: Dict[str, List[Tuple[float, float]]] = {}
    words: List[str] = []
    for item in items:
        tokens, positions = item.tokens()
        surface = np.unique([t[p] for t, p in zip(tokens, positions)], return_inverse=True)[1]
        with torch.inference_mode():
            token_layer, layers = bilm.encode(TokenBatch.from_sentences(tokens))
        rows, at = torch.arange(len(tokens)), torch.tensor(positions)
        stack = [torch.cat([token_layer, token_layer], -1)[rows, at + 1].float().numpy()]
        stack += [layer[rows, at + 1].float().numpy() for layer in layers]
        average = stack[1] + stack[2]
        found = {
            "vectors (layers 1-2)": average,
            "vectors less their form's mean (the vectors representation)": remove_form(
                average, [t[p].lower() for t, p in zip(tokens, positions)]
            ),
            "vectors less the context-free layer 0": average - 2 * stack[0],
            "LM states around the word (top layer, before and after)": torch.cat(
                [layers[-1][rows, at, :proj], layers[-1][rows, at + 2, proj:]], -1
            )
            .float()
            .numpy(),
        }
        inducer = Inducer(bilm, head, InductionSettings(min_occurrences=1))
        for i, (t, p) in enumerate(zip(tokens, positions)):
            inducer.add(item.word, t, p, Occurrence(" ".join(t), 0, 1, f"text {i}"))
        inducer.flush()
        bags, _ = inducer._bags(inducer._substitutes(inducer.stores[item.word]))
        found["substitutes, lemma-folded (the default reading)"] = np.asarray(bags.todense())
        starts = [len(" ".join(t[:p])) + (1 if p else 0) for t, p in zip(tokens, positions)]
        occurrences = [Occurrence(" ".join(t), a, a + len(t[p])) for t, p, a in zip(tokens, positions, starts)]
        context = inducer.context_vectors(occurrences, [item.word, *item.forms])
        found["context words, with the LM head's output embeddings (the context representation)"] = context - context.mean(0)
        words.append(item.word)
        for name, x in found.items():
            labels = kmeans_labels(x, item.n_senses)
            sums.setdefault(name, []).append((adjusted_rand(item.gold, labels), adjusted_rand(surface, labels)))
    return {
        name: {
            "ari_gold": float(np.mean([a for a, _ in v])),
            "ari_form": float(np.mean([b for _, b in v])),
            "per_word": {w: round(float(a), 6) for w, (a, _) in zip(words, v)},  # for a paired comparison of two models
        }
        for name, v in sums.items()
    }


def _rate(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def _fields(pairs: List[str]) -> Dict[str, object]:
    """``FIELD=VALUE`` pairs as InductionSettings keyword arguments (numbers parsed; ``None`` is None)."""
    out: Dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set {pair!r}: write FIELD=VALUE")
        try:
            out[key] = None if value == "None" else int(value) if value.lstrip("-").isdigit() else float(value)
        except ValueError:
            out[key] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", default=None, help="the biLM (default: the embedded default)")
    parser.add_argument(
        "--folder",
        type=Path,
        default=LABELLED,
        help="the labelled set (default: tests/data/senses/labelled; tests/data/senses/natural and tests/data/senses/registers are the others)",
    )
    parser.add_argument("--words", nargs="*", default=None, help="only these words of the set (ambiguous or controls)")
    parser.add_argument("--no-controls", action="store_true", help="induce on the ambiguous words only, not the one-sense controls")
    parser.add_argument("--skip-induce", action="store_true", help="only the fixed-k vector measurement")
    parser.add_argument("--representation", default=None, help="induce with this representation (default: induce's own)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="an InductionSettings field for induce (repeatable): significance=0.5",
    )
    parser.add_argument("--induce-only", action="store_true", help="leave out the fixed-k and feature measurements")
    parser.add_argument("--precision", default="float32", help="the biLM's inference precision: float32, bfloat16 or int8")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    use_threads(1)
    from spacy_elmo.hub.load import load_bilm
    from spacy_elmo.induction.induce import InductionSettings, induce, load_head

    found = load_labelled(args.folder, words=args.words, kind="all")
    if args.words is not None and not found:
        raise SystemExit(f"none of {' '.join(args.words)} is a word of the labelled set")
    items = [i for i in found if not i.is_control]  # every figure but the controls' rate is theirs
    controls = [] if args.no_controls else [i for i in found if i.is_control]
    bilm = load_bilm(args.weights)
    bilm.set_inference_precision(args.precision)
    clock = Clock().start()
    fixed = fixed_k(items, bilm) if items and not args.induce_only else {}
    result: Dict[str, object] = {
        "model": args.weights or "en_default (embedded)",
        "machine": machine(1),
        "command": "OMP_NUM_THREADS=1 python bench/sense_set.py"
        + (f" --weights {args.weights}" if args.weights else "")
        + (f" --representation {args.representation}" if args.representation else "")
        + "".join(f" --set {kv}" for kv in args.set)
        + (" --induce-only" if args.induce_only else "")
        + (" --no-controls" if args.no_controls else "")
        + (f" --precision {args.precision}" if args.precision != "float32" else ""),
        "words": {i.word: i.n_senses for i in items},
        "controls": [i.word for i in controls],
        "fixed_k": {
            mix: {algo: {"mean_ari": float(np.mean(list(v.values()))), "per_word": v} for algo, v in per.items()}
            for mix, per in fixed.items()
        },
    }
    print("vectors, k fixed at gold (mean ARI):")
    for mix, per in result["fixed_k"].items():  # type: ignore[union-attr]
        print(f"  {mix:8s} k-means {per['kmeans']['mean_ari']:.3f}  average linkage {per['average_linkage']['mean_ari']:.3f}")
    head = load_head(args.weights)
    if head is not None and items and not args.induce_only:
        result["features"] = features(items, bilm, head)
        print("features, k-means at gold (mean ARI against the senses / against the surface forms):")
        for name, v in result["features"].items():  # type: ignore[union-attr]
            print(f"  {v['ari_gold']:.3f} / {v['ari_form']:.3f}  {name}")
    if not args.skip_induce:
        scores = []
        per_word: List[Dict[str, object]] = []
        settings = InductionSettings(**({"representation": args.representation} if args.representation else {}), **_fields(args.set))
        result["representation"] = settings.representation
        for item in [*items, *controls]:
            (ws,) = induce(item.sentences, {item.word: item.forms}, bilm=bilm, head=head, progress=False, settings=settings)
            s = score_word(item, ws)
            scores.append(s)
            per_word.append({**s.__dict__, "check": ws.extra.get("check"), "labels": [int(v) for v in ws.labels]})
            ari = "control  " if s.ari is None else f"ARI {s.ari:.3f}"
            print(f"  {s.word:9s} {ari}  senses {s.n_senses} (gold {s.gold_senses})  named {s.named}/{s.large}  {s.names}")
        result["induce"] = {**summary(scores), "per_word": per_word}
        ind = result["induce"]
        if items:
            print(
                f"induce (own number of senses): mean ARI {ind['mean_ari']:.3f}, {ind['senses_per_word']:.2f} senses per word, "
                f"named share {ind['named_share']:.2f} of {ind['large_senses']} large senses, "
                f"{ind['name_words_accepted']:.0%} of their names' words accepted"
            )
        print(
            f"the rule's promises: {_rate(ind['controls_one_sense'])} of {ind['controls']} controls given one sense, "
            f"{_rate(ind['ambiguous_two_or_more'])} of {ind['ambiguous_words']} ambiguous words given two or more"
        )
    result["seconds"] = round(clock.elapsed, 1)
    write_results(args.json, result, default=str)


if __name__ == "__main__":
    main()
