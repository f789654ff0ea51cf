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

``--component`` times ``nlp.pipe`` instead: a blank pipeline of the text's language with the
``elmo`` component at its defaults but ``precision`` (``nlp.pipe``'s batch of 1,000 Docs,
``max_batch_tokens`` 4096, the token cache on, emptied before each run: from cold), pre-tokenised
Docs made before the clock; the difference column is then the Docs' ``doc.tensor``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np
from bench_common import (
    WORK,
    add_threads,
    command,
    cpu_seconds,
    interleaved,
    machine,
    median_run,
    text_sentences,
    timed,
    use_threads,
    write_results,
)
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
    ap.add_argument("--component", action="store_true", help="time nlp.pipe with the elmo component instead (see above)")
    add_threads(ap)
    a = ap.parse_args()
    use_threads(a.threads)
    from spacy_elmo import load_bilm

    precisions = a.precisions.split(",")
    if not precisions or not set(precisions) <= set(PRECISIONS):
        raise SystemExit(f"--precisions: any of {PRECISIONS}; got {a.precisions!r}")
    sentences = text_sentences(a.text, a.sentences)
    pipelines = {p: component_pipeline(model_path(a.weights, a.work), p) for p in precisions} if a.component else {}
    bilm = next(iter(pipelines.values())).get_pipe("elmo").bilm if a.component else load_bilm(model_path(a.weights, a.work))
    encoder = bilm.token_encoder
    if not hasattr(encoder, "table_pooled"):
        raise SystemExit(f"{type(encoder).__name__} has no table path (a char CNN's only)")
    by_tables = encoder.table_pooled
    own_tables = {p: nlp.get_pipe("elmo").bilm.token_encoder.table_pooled for p, nlp in pipelines.items()}
    outputs: Dict[str, Dict[str, Any]] = {arm: {} for arm in ARMS}

    def arm(name: str, precision: str) -> Dict[str, Any]:
        if not a.component:
            encoder.table_pooled = by_tables if name == "tables" else (lambda ids: None)
            return run(bilm, sentences, precision, a.batch, outputs[name])
        component_encoder = pipelines[precision].get_pipe("elmo").bilm.token_encoder
        component_encoder.table_pooled = own_tables[precision] if name == "tables" else (lambda ids: None)
        return pipe_run(pipelines[precision], sentences, outputs[name], precision)

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
        "batch": "nlp.pipe defaults" if a.component else a.batch,
        "component": a.component,
        "runs": runs,
        "precisions": rows,
    }
    write_results(a.json, results, markdown(results))


def component_pipeline(model: str, precision: str) -> Any:
    """A blank English pipeline with the ``elmo`` component at its defaults but ``precision``."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": model, "precision": precision})
    nlp.initialize()
    return nlp


def pipe_run(nlp: Any, sentences: Sequence[Sequence[str]], keep: Dict[str, Any], precision: str) -> Dict[str, Any]:
    """One timed ``nlp.pipe`` over pre-tokenised Docs, the token cache emptied first; the tensors go to ``keep``."""
    from spacy.tokens import Doc

    nlp.get_pipe("elmo").bilm.clear_token_cache()
    docs = [Doc(nlp.vocab, words=list(words)) for words in sentences]
    before = cpu_seconds()
    done, seconds = timed(lambda: list(nlp.pipe(docs)))
    cpu = cpu_seconds() - before
    keep[precision] = [doc.tensor for doc in done]
    tokens = sum(map(len, sentences))
    return {"seconds": seconds, "tokens_per_s": tokens / seconds, "cpu_seconds": cpu, "tokens_per_cpu_s": tokens / cpu}


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
