#!/usr/bin/env python3
"""The pseudoword check (``spacy elmo induce --check``) on the books and on the biomedical articles.

    OMP_NUM_THREADS=1 python bench/wsi_check.py --books DIR --biomed DIR [--weights PATH] [--json bench/results/wsi-check.json]

For each corpus: ``--pairs`` pseudowords made of pairs of its frequent content words (each word
about as frequent as its partner), ``--per-word`` occurrences of each, induced with the default
settings (their own number of senses) and with the number fixed at 2; mean adjusted Rand index
against the known split, per pair and on average. ``--books`` reads the first ``--max-files``
books (sorted by name), ``--biomed`` every article.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Optional

from bench_common import Clock, machine, use_threads, write_results

from spacy_elmo.induction import DEFAULT_REPRESENTATION


def run(files: List[Path], weights: Optional[str], n_pairs: int, per_word: int, representation: str) -> Dict[str, object]:
    from spacy_elmo.evaluation.wsi_check import pseudoword_check
    from spacy_elmo.hub.load import load_bilm
    from spacy_elmo.induction.induce import InductionSettings, load_head

    bilm, head = load_bilm(weights), load_head(weights)
    out: Dict[str, object] = {"files": len(files)}
    for name, settings in (
        ("own_k", InductionSettings(representation=representation)),
        ("k2", InductionSettings(representation=representation, n_senses=2)),
    ):
        with Clock() as clock:
            report = pseudoword_check(files, bilm, head, settings, n_pairs=n_pairs, per_word=per_word)
        out[name] = {**report.as_dict(), "seconds": round(clock.seconds, 1)}
        print(f"  {name}: {report.line()}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--books", type=Path, default=None, help="folder of the books (*.txt.gz)")
    parser.add_argument("--biomed", type=Path, default=None, help="folder of the biomedical articles (*.txt.gz)")
    parser.add_argument("--max-files", type=int, default=10, help="books read (the first, by name)")
    parser.add_argument("--weights", default=None, help="the biLM (default: the embedded default)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--per-word", type=int, default=100)
    parser.add_argument(
        "--representation", default=DEFAULT_REPRESENTATION, help=f"induce's representation (default: induce's, {DEFAULT_REPRESENTATION})"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    use_threads(1)
    result: Dict[str, object] = {
        "model": args.weights or "en_default (embedded)",
        "machine": machine(1),
        "command": "OMP_NUM_THREADS=1 python bench/wsi_check.py --books BOOKS --biomed ARTICLES"
        + (f" --weights {args.weights}" if args.weights else "")
        + f" --representation {args.representation}",
        "representation": args.representation,
    }
    for name, folder, limit in (("books", args.books, args.max_files), ("biomed", args.biomed, None)):
        if folder is None:
            continue
        files = sorted(folder.glob("*.txt.gz"))[:limit]
        if not files:
            parser.error(f"--{name}: no *.txt.gz files in {folder}")
        print(f"{name}: {len(files)} files")
        result[name] = run(files, args.weights, args.pairs, args.per_word, args.representation)
    write_results(args.json, result)


if __name__ == "__main__":
    main()
