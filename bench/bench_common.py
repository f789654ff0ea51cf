"""What the bench scripts share, in one place: the folders, the ``--threads`` option, writing a
results file (JSON, with its markdown table beside it), running a measurement in a fresh worker
process, and the sentences of the Gutenberg test books.

A script imports it as ``from bench_common import ...`` (``python bench/NAME.py`` puts ``bench/`` first
on ``sys.path``; a script imported from elsewhere puts it there itself).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
DATA = REPO / "project" / "assets" / "data"  # `spacy project assets project/` + `spacy project run data project/`
SAMPLE_BOOKS = REPO / "project" / "assets" / "general_sample"


def add_threads(parser: argparse.ArgumentParser, default: Optional[int] = 1) -> None:
    """The ``--threads`` option every timed script takes (torch's intra-op threads)."""
    parser.add_argument("--threads", type=int, default=default, help=f"torch threads (default {default})")


def use_threads(threads: Optional[int]) -> None:
    """Set torch's threads to ``threads`` (left as they are when None or 0)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def write_results(path: Path, results: Mapping[str, Any], table: Optional[str] = None) -> None:
    """Write ``results`` as JSON to ``path`` (its folder made), and ``table`` (markdown) to the
    ``.md`` beside it, which is also printed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    if table is not None:
        path.with_suffix(".md").write_text(table, encoding="utf-8")
        print(table)


def run_worker(script: str, task: Mapping[str, Any], env: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Run ``script --worker TASK_JSON`` in a fresh process (``env``: its environment, default this
    one's) and return the JSON object its last line of output holds; raises with its stderr."""
    out = subprocess.run(
        [sys.executable, script, "--worker", json.dumps(task)], capture_output=True, text=True, env=dict(env if env is not None else os.environ)
    )
    if out.returncode != 0:
        raise RuntimeError(f"benchmark worker failed for {dict(task)}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def book_sentences(n: int, max_tokens: int = 100, sample: bool = True) -> List[List[str]]:
    """The first ``n`` sentences (1 to ``max_tokens`` tokens) of the Gutenberg books' test split:
    the project's assets or, with ``sample`` and without them, the in-repo sample (said on stderr)."""
    from spacy_elmo.training.corpus import SplitStats, read_units, sentences_of

    folder = DATA / "gutenberg_en_books"
    if sample and not (folder / "manifest.tsv").is_file():
        folder = SAMPLE_BOOKS
        print(f"(Gutenberg books not found: using the in-repo sample {folder.relative_to(REPO)})", file=sys.stderr)
    with (folder / "manifest.tsv").open(encoding="utf-8") as fh:
        books = [folder / row["file"] for row in csv.DictReader(fh, delimiter="\t") if row["split"] == "test"]

    def units():
        for book in books:
            for unit in read_units(book, "paragraph", SplitStats()):
                yield unit, "test"

    out: List[List[str]] = []
    for tokens, _ in sentences_of(units(), "en"):
        if 0 < len(tokens) <= max_tokens:
            out.append(tokens)
        if len(out) >= n:
            break
    return out
