#!/usr/bin/env python3
"""Does `change` call a change a person would call, and only that? Corpus pairs built from the
hand-labelled sense sets, where the truth is known by construction.

    OMP_NUM_THREADS=1 python bench/change_flip.py [--weights PATH] [--draws 5] [--json bench/results/change-flip.json]

For each set (``tests/data/senses/labelled``, ``natural`` and ``registers``) and each draw (a
seed), the sentences of every word are dealt into two corpora, A and B, without repeats:

- ``flip`` (each two-sense word): three quarters of sense 1's sentences and a quarter of sense 2's
  go to A, the rest to B (18/18 becomes 14/4 in A and 4/14 in B): the word changed;
- ``stable`` (the same words, in a second run): each sense's sentences halved between A and B:
  the word did not change, the corpora differ only by the draw;
- ``control`` (one-sense words, in both runs): halved: no change.

Each run is one ``detect_change`` over all the words of its corpora, as a user runs ``change``
(the permutation test, Benjamini-Hochberg across the words of the run, the senses induced jointly).
Reported per set and overall: the binary call's accuracy (changed for ``flip``, not changed for
``stable`` and ``control``), its rate on each kind, the AUC of the ranking measure (flips against
stable words and controls of the same draw), and how often the sense lines say what happened: for a
flip, a sense whose share moved beyond noise (Fisher's p <= alpha) in the right direction for its
majority gold sense; for a stable word, every sense within noise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
from bench_common import REPO, machine, use_threads, write_results

sys.path.insert(0, str(REPO / "project" / "scripts"))

from labelled_senses import LabelledWord, load_labelled  # noqa: E402

SETS = {name: REPO / "tests" / "data" / "senses" / name for name in ("labelled", "natural", "registers")}


def deal(item: LabelledWord, kind: str, rng: np.random.Generator) -> Tuple[List[Tuple[str, str]], List[Tuple[str, str]]]:
    """The word's (sense, sentence) pairs of corpus A and of corpus B for ``kind`` (flip, stable, control)."""
    senses = sorted(set(item.senses))
    a: List[Tuple[str, str]] = []
    b: List[Tuple[str, str]] = []
    for j, sense in enumerate(senses):
        rows = [(s, t) for s, t in zip(item.senses, item.sentences) if s == sense]
        rows = [rows[i] for i in rng.permutation(len(rows))]
        share = 0.5 if kind != "flip" else (0.75 if j == 0 else 0.25)
        cut = int(round(share * len(rows)))
        a += rows[:cut]
        b += rows[cut:]
    return a, b


def run_once(items: Dict[str, Tuple[LabelledWord, str]], seed: int, bilm: Any, head: Any, alpha: float) -> List[Dict[str, Any]]:
    """One ``detect_change`` over the words of ``items`` (word -> (item, kind)), dealt with ``seed``."""
    from spacy_elmo.change import ChangeSettings, detect_change

    rng = np.random.default_rng(seed)
    corpus_a: List[str] = []
    corpus_b: List[str] = []
    dealt: Dict[str, Tuple[List[Tuple[str, str]], List[Tuple[str, str]]]] = {}
    for word, (item, kind) in items.items():
        dealt[word] = deal(item, kind, rng)
        corpus_a += [t for _, t in dealt[word][0]]
        corpus_b += [t for _, t in dealt[word][1]]
    words = {word: list(item.forms) for word, (item, _kind) in items.items()}
    settings = ChangeSettings(min_occurrences=5, alpha=alpha, seed=seed)
    report = detect_change(corpus_a, corpus_b, words, names=("A", "B"), bilm=bilm, head=head, settings=settings, progress=False)
    rows = []
    for change in report.words:
        item, kind = items[change.word]
        row: Dict[str, Any] = {
            "word": change.word,
            "kind": kind,
            "seed": seed,
            "n_a": change.n_a,
            "n_b": change.n_b,
            "changed": change.changed,
            "p": change.p_value,
            "q": change.q_value,
            "measure": change.measures.get(report.measure),
            "n_senses": len(change.senses),
            "senses": [
                {"name": s.name, "share_a": s.share_a, "share_b": s.share_b, "p": s.share_p, "within_noise": s.within_noise, "status": s.status}
                for s in change.senses
            ],
        }
        row["sense_lines_right"] = sense_lines_right(change, dealt[change.word], kind, alpha)
        rows.append(row)
    return rows


def sense_lines_right(change: Any, dealt: Tuple[List[Tuple[str, str]], List[Tuple[str, str]]], kind: str, alpha: float) -> bool:
    """Whether the sense lines say what happened: for a flip, some induced sense moved beyond noise in
    the direction of the gold sense most of its occurrences carry; otherwise every sense within noise."""
    if kind != "flip":
        return all(s.within_noise is not False for s in change.senses)
    if change.word_senses is None:
        return False
    gold_of = {t: s for s, t in dealt[0] + dealt[1]}
    first = sorted({s for s, _ in dealt[0] + dealt[1]})[0]  # the sense dealt mostly to A
    labels = change.word_senses.labels
    occurrences = change.word_senses.occurrences
    for sense in change.senses:
        if sense.within_noise is not False:
            continue
        members = [o for o, label in zip(occurrences, labels) if label == sense.id]
        golds = [gold_of.get(o.text) for o in members]
        mostly_first = sum(g == first for g in golds) * 2 > len(golds)
        if mostly_first == (sense.share_a > sense.share_b):
            return True
    return False


def auc(pos: List[float], neg: List[float]) -> float:
    """The probability that a flip's measure is above a non-flip's (ties count half)."""
    if not pos or not neg:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return float(wins / (len(pos) * len(neg)))


def summarise(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    right = [(r["changed"] is True) == (r["kind"] == "flip") for r in rows if r["changed"] is not None]
    out: Dict[str, Any] = {"accuracy": float(np.mean(right)) if right else None, "n": len(right)}
    for kind in ("flip", "stable", "control"):
        calls = [r["changed"] for r in rows if r["kind"] == kind and r["changed"] is not None]
        out[f"{kind}_called_changed"] = float(np.mean(calls)) if calls else None
        lines = [r["sense_lines_right"] for r in rows if r["kind"] == kind]
        out[f"{kind}_sense_lines_right"] = float(np.mean(lines)) if lines else None
    aucs = []
    for seed in sorted({r["seed"] for r in rows}):
        pos = [r["measure"] for r in rows if r["seed"] == seed and r["kind"] == "flip" and r["measure"] is not None]
        neg = [r["measure"] for r in rows if r["seed"] == seed and r["kind"] != "flip" and r["measure"] is not None]
        aucs.append(auc(pos, neg))
    out["ranking_auc_flip_vs_rest_same_run"] = float(np.nanmean(aucs)) if aucs else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", default=None, help="the biLM (default: the embedded default)")
    parser.add_argument("--draws", type=int, default=5, help="seeds per set (each: a flip run and a stable run)")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="write the results here (and a .md table beside it)")
    args = parser.parse_args()
    use_threads(args.threads)

    from spacy_elmo.hub.load import load_bilm
    from spacy_elmo.induction.induce import load_head

    bilm, head = load_bilm(args.weights), load_head(args.weights)
    results: Dict[str, Any] = {"model": args.weights or "en_default", "machine": machine(args.threads), "alpha": args.alpha, "draws": args.draws, "sets": {}}
    every: List[Dict[str, Any]] = []
    for name, folder in SETS.items():
        ambiguous = [w for w in load_labelled(folder, kind="ambiguous") if w.n_senses == 2]
        controls = load_labelled(folder, kind="controls")
        rows: List[Dict[str, Any]] = []
        for draw in range(args.draws):
            for kind in ("flip", "stable"):
                items = {w.word: (w, kind) for w in ambiguous}
                items.update({w.word: (w, "control") for w in controls})
                rows += run_once(items, 1000 * draw + (kind == "stable"), bilm, head, args.alpha)
                print(f"{name} draw {draw} {kind}: {summarise([r for r in rows if r['seed'] == 1000 * draw + (kind == 'stable')])}", flush=True)
        results["sets"][name] = {"summary": summarise(rows), "rows": rows}
        every += rows
    results["summary"] = summarise(every)
    lines = [
        "| set | binary accuracy | flips called changed | stable called changed | controls called changed | AUC flip vs rest | flip sense lines right | stable sense lines right |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, summary in [*((n, s["summary"]) for n, s in results["sets"].items()), ("all", results["summary"])]:
        cells = [summary[k] for k in ("accuracy", "flip_called_changed", "stable_called_changed", "control_called_changed",
                                      "ranking_auc_flip_vs_rest_same_run", "flip_sense_lines_right", "stable_sense_lines_right")]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join("n/a" if c is None else f"{c:.2f}" for c in cells) + " |")
    table = "\n".join(lines)
    print(table)
    if args.json:
        write_results(args.json, results, table)


if __name__ == "__main__":
    main()
