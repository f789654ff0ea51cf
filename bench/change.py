#!/usr/bin/env python3
"""Semantic change at corpus scale: two corpora of a million words each, 50 target words, one thread.

    python bench/change.py --books BOOKS_FOLDER --modern MODERN_TEXT.txt.gz [--words-per-corpus 1000000]
        [--n-words 50] [--max-occurrences 200] [--threads 1] [--json bench/results/change-speed.json]

Corpus A is the first ``--words-per-corpus`` whitespace-separated words of the Gutenberg books
(files in name order), corpus B the first as many of the modern text; both are written to a
temporary folder as gzipped text. The 50 target words are the content words frequent in both
(:func:`spacy_elmo.change.detect.candidate_words`, chosen before the clock starts). The timed run
is ``detect_change`` with the embedded default model: load the model, stream both corpora
(tokenise, split sentences, sample at most ``--max-occurrences`` of each word per corpus), read
every sampled occurrence with the biLM and its LM head, induce each word's senses jointly, and
every measure with its bootstrap interval. Wall and CPU seconds of the process are both kept: on
a machine shared with other jobs the wall time includes the waits for a core. Peak resident
memory is read from the kernel.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
from pathlib import Path
from typing import Iterator, List

from bench_common import Clock, machine, peak_rss_mb, write_results


def first_words(paths: List[Path], budget: int) -> Iterator[str]:
    """Lines of the files, in order, until ``budget`` whitespace-separated words."""
    seen = 0
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:  # type: ignore[operator]
            for line in handle:
                if seen >= budget:
                    return
                words = len(line.split())
                if words:
                    seen += words
                    yield line


def write_corpus(paths: List[Path], budget: int, out: Path) -> int:
    count = 0
    with gzip.open(out, "wt", encoding="utf-8") as handle:
        for line in first_words(paths, budget):
            handle.write(line if line.endswith("\n") else line + "\n")
            count += len(line.split())
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--books", type=Path, required=True, help="folder of Gutenberg books (.txt or .txt.gz)")
    parser.add_argument("--modern", type=Path, nargs="+", required=True, help="modern text files (.txt or .txt.gz)")
    parser.add_argument("--words-per-corpus", type=int, default=1_000_000)
    parser.add_argument("--n-words", type=int, default=50)
    parser.add_argument("--max-occurrences", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from spacy_elmo.change.detect import ChangeSettings, candidate_words, detect_change
    from spacy_elmo.threads import set_threads

    set_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        books = sorted(p for p in args.books.rglob("*") if p.name.endswith((".txt", ".txt.gz")))
        a, b = Path(tmp) / "a.txt.gz", Path(tmp) / "b.txt.gz"
        words_a = write_corpus(books, args.words_per_corpus, a)
        words_b = write_corpus(list(args.modern), args.words_per_corpus, b)
        settings = ChangeSettings(max_occurrences=args.max_occurrences)
        with Clock() as choosing:
            targets = candidate_words(a, b, args.n_words, settings.min_occurrences)
        with Clock() as clock:
            report = detect_change(a, b, targets, names=("books", "modern"), settings=settings, progress=False)
    measured = [w for w in report.words if w.measured]
    result = {
        "what": "spacy elmo change's work (detect_change) on two corpora, targets given: load, stream both, sample, biLM + LM head, senses, measures, bootstrap",
        "model": "en_default (embedded)",
        "settings": {"vectors": settings.vectors, "measure": settings.measure, "representation": settings.induction.representation},
        "machine": machine(),  # its load average: at the end
        "words": {"a": words_a, "b": words_b},
        "target_words": len(targets),
        "max_occurrences": args.max_occurrences,
        "occurrences_read": sum(w.n_a + w.n_b for w in report.words),
        "words_measured": len(measured),
        "seconds": round(clock.seconds, 1),
        "cpu_seconds": round(clock.cpu_seconds, 1),
        "target_seconds": 300,
        "choosing_targets_seconds": round(choosing.seconds, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "top_10": [[w.word, round(w.measures[report.measure], 4)] for w in measured[:10]],
        "command": "python bench/change.py --books BOOKS --modern MODERN/wikipedia.train.txt.gz --threads 1 --json bench/results/change-speed.json",
    }
    print(json.dumps(result, indent=1))
    write_results(args.json, result)


if __name__ == "__main__":
    main()
