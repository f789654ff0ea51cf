#!/usr/bin/env python3
"""The char CNN by table lookups against its convolutions, per precision, interleaved in one process.

    python bench/char_tables.py --text ud --sentences 300 --repeats 7 --json bench/results/char-tables-default.json
    python bench/char_tables.py --weights elmo-original --text ud --sentences 300 --repeats 5 --json bench/results/char-tables-original.json

At inference the token encoder's convolutions and max-pooling run as float32 table lookups
(:mod:`spacy_elmo.kernels.char_table`); this measures what that buys the whole biLM: for each
precision (``--precisions``), ``embed_sentences`` at ``--batch`` with the tables and with the
convolutions instead (the encoder's ``table_pooled`` turned off), the runs in turns over
``--repeats`` rounds; tokens per CPU-second (the median run) and the largest difference of the two
arms' vectors. ``--weights`` as ``bench/int8.py`` (nothing: the embedded default).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
from bench_common import WORK, add_threads, command, interleaved, machine, median_run, text_sentences, use_threads, write_results
from int8 import PRECISIONS, model_path, run

ARMS = ("convolutions", "tables")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="model directory, published name or shape (default: the embedded default model)")
    ap.add_argument("--text", default="ud", help="books, ud or a file")
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--precisions", default="float32,bfloat16,int8", help=f"comma-separated, of {', '.join(PRECISIONS)}")
    ap.add_argument("--work", type=Path, default=WORK, help="where random weights are written")
    ap.add_argument("--json", type=Path, help="also write the report here")
    add_threads(ap)
    a = ap.parse_args()
    use_threads(a.threads)
    from spacy_elmo import load_bilm

    precisions = a.precisions.split(",")
    if not precisions or not set(precisions) <= set(PRECISIONS):
        raise SystemExit(f"--precisions: any of {PRECISIONS}; got {a.precisions!r}")
    sentences = text_sentences(a.text, a.sentences)
    bilm = load_bilm(model_path(a.weights, a.work))
    encoder = bilm.token_encoder
    if not hasattr(encoder, "table_pooled"):
        raise SystemExit(f"{type(encoder).__name__} has no table path (a char CNN's only)")
    by_tables = encoder.table_pooled
    outputs: Dict[str, Dict[str, Any]] = {arm: {} for arm in ARMS}

    def arm(name: str, precision: str) -> Dict[str, Any]:
        encoder.table_pooled = by_tables if name == "tables" else (lambda ids: None)
        return run(bilm, sentences, precision, a.batch, outputs[name])

    configs = {f"{p} {name}": (lambda p=p, name=name: arm(name, p)) for p in precisions for name in ARMS}
    runs = interleaved(configs, a.repeats, label="", show="tokens_per_cpu_s")
    rows: Dict[str, Any] = {}
    for p in precisions:
        speed = {name: median_run(runs[f"{p} {name}"], "tokens_per_cpu_s")["tokens_per_cpu_s"] for name in ARMS}
        gap = max(float(np.abs(x - y).max()) for x, y in zip(outputs["tables"][p], outputs["convolutions"][p]) if x.size)
        rows[p] = {"tokens_per_cpu_s": speed, "speedup": speed["tables"] / speed["convolutions"], "largest_difference": gap}
    results = {
        "machine": machine(a.threads),
        "command": command("char_tables.py", hide={Path(a.text).name: str(a.text), "WORK": str(a.work)}),
        "weights": a.weights or "embedded default",
        "text": a.text if a.text in ("books", "ud") else Path(a.text).name,
        "sentences": len(sentences),
        "tokens": sum(map(len, sentences)),
        "batch": a.batch,
        "runs": runs,
        "precisions": rows,
    }
    write_results(a.json, results, markdown(results))


def markdown(r: Dict[str, Any]) -> str:
    lines: List[str] = [
        f"{r['weights']}, {r['sentences']} sentences ({r['tokens']} tokens) of {r['text']}, batch {r['batch']}, "
        f"{r['machine'].get('threads', 1)} thread(s), {r['machine'].get('cpu', '')}",
        "",
        "| precision | convolutions (tokens per CPU-s) | tables | speed-up | largest difference of the vectors |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for p, row in r["precisions"].items():
        s = row["tokens_per_cpu_s"]
        lines.append(f"| {p} | {s['convolutions']:,.0f} | {s['tables']:,.0f} | {row['speedup']:.2f}x | {row['largest_difference']:.2g} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
