#!/usr/bin/env python3
"""int8 inference against bfloat16 and float32, side by side in one run: speed and distance.

    python bench/int8.py --weights original --text FILE --sentences 300 --json bench/results/int8-original.json
    python bench/int8.py --text FILE --sentences 300 --json bench/results/int8-default.json   # embedded default

* speed: ``embed_sentences`` tokens/s at ``--batch`` (64) per precision, the runs of the three
  precisions interleaved (``--repeats`` each; the median run is reported, all are kept);
* distance: per-token cosine of each precision's vectors to float32's (mean, 1st percentile and
  minimum over all tokens), every layer and the default mix (the average of the layers);
* ``--weights``: a model directory, a published model's name or shape (random weights of that
  shape, written once under ``--work``), or nothing for the embedded default model.

``--memory`` measures instead each precision's peak resident memory, in a fresh process that loads
the model, sets the precision and embeds the sentences once, and the memory still resident after
the run; ``int8-released`` is int8 after ``BiLM.release_float_products()`` (the LSTM's float32
weights freed: int8-only inference).

``--text``: ``books``, ``ud`` or a file (as ``bench/bf16.py``). Writes ``--json`` and prints a
markdown table. Precisions this CPU cannot run (int8 without AVX2) are reported as skipped.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from bench_common import (
    WORK,
    add_threads,
    command,
    cpu_seconds,
    interleaved,
    machine,
    median_run,
    random_weights,
    text_sentences,
    timed,
    token_cosines,
    use_threads,
    write_results,
)

PRECISIONS = ("float32", "bfloat16", "int8")


def model_path(weights: Optional[str], work: Path) -> str:
    """The weights to load: the default model, a directory, or random weights of a named shape."""
    from spacy_elmo.models import default_model_path

    if weights is None:
        return str(default_model_path())
    if Path(weights).exists():
        return weights
    return str(random_weights(weights, work / f"random-{weights}"))


def distance(ref: List[np.ndarray], other: List[np.ndarray]) -> Dict[str, Any]:
    """Per layer and for the layers' average: mean, 1st percentile and minimum per-token cosine."""
    rows = {f"layer{k}": c for k, c in enumerate(token_cosines(ref, other))}
    rows["mix"] = token_cosines([r.mean(0, keepdims=True) for r in ref], [o.mean(0, keepdims=True) for o in other])[0]
    return {name: {"mean": float(c.mean()), "p1": float(np.percentile(c, 1)), "min": float(c.min())} for name, c in rows.items()}


def run(bilm: Any, sentences: Sequence[Sequence[str]], precision: str, batch: int, keep: Dict[str, Any]) -> Dict[str, Any]:
    """One timed pass of ``sentences`` at ``precision`` (after a warm-up batch); outputs go to ``keep``."""
    bilm.set_inference_precision(precision)
    bilm.embed_sentences(sentences[:batch], batch_size=batch)
    cpu_before = cpu_seconds()
    out, seconds = timed(bilm.embed_sentences, sentences, batch_size=batch)
    cpu = cpu_seconds() - cpu_before
    keep[precision] = out
    tokens = sum(map(len, sentences))
    # CPU seconds as well as wall: on a shared machine the wall clock also counts the waits for the core
    return {"seconds": seconds, "tokens_per_s": tokens / seconds, "cpu_seconds": cpu, "tokens_per_cpu_s": tokens / cpu}


MEMORY_CHILD = """
import json, sys
import torch
from bench_common import peak_rss_mb, rss_mb, text_sentences
from spacy_elmo import load_bilm
torch.set_num_threads(1)
model, text, n, batch, precision, release = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6] == "1"
sentences = text_sentences(text, n)
bilm = load_bilm(model)
loaded = peak_rss_mb()
parameters = sum(p.numel() * p.element_size() for p in bilm.parameters()) / 2**20
bilm.set_inference_precision(precision)
if release:
    bilm.release_float_products()
bilm.embed_sentences(sentences, batch_size=batch)
print(json.dumps({"peak_rss_mb": peak_rss_mb(), "after_load_mb": loaded, "resident_after_mb": rss_mb(),
                  "parameters_mb": parameters,
                  "float32_parameters_kept_mb": sum(p.numel() * p.element_size() for p in bilm.parameters()) / 2**20}))
"""
RELEASED = "-released"  # int8 with the LSTM's float32 weights freed (BiLM.release_float_products)


def memory(model: str, text: str, n: int, batch: int, precisions: Sequence[str]) -> Dict[str, Any]:
    """Peak resident memory of a fresh process that loads the model, sets the precision and embeds the
    sentences once, per precision (MB); and the float32 parameters' size."""
    from bench_common import run_child

    runs = {p: run_child(MEMORY_CHILD, model, text, n, batch, p, 0) for p in precisions}
    if "int8" in precisions:
        runs["int8" + RELEASED] = run_child(MEMORY_CHILD, model, text, n, batch, "int8", 1)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="model directory, published name or shape (default: the embedded default model)")
    ap.add_argument("--text", default="books", help="books, ud or a file (see above)")
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--precisions", default=",".join(PRECISIONS), help="which to run, float32 first (bfloat16 is very slow without bf16 units)"
    )
    ap.add_argument("--work", type=Path, default=WORK, help="where random weights are written (default: the benches' folder in the system temp dir, outside the clone)")
    ap.add_argument("--json", type=Path, help="also write the report here")
    ap.add_argument("--memory", action="store_true", help="instead of speed and distance: each precision's peak memory, a fresh process each")
    add_threads(ap)
    a = ap.parse_args()
    use_threads(a.threads)
    from spacy_elmo import load_bilm
    from spacy_elmo.kernels.int8 import Int8Unavailable, activation_levels

    sentences = text_sentences(a.text, a.sentences)
    bilm = load_bilm(model_path(a.weights, a.work))
    precisions = a.precisions.split(",")
    if precisions[0] != "float32" or not set(precisions) <= set(PRECISIONS):
        raise SystemExit(f"--precisions: float32 first, then any of {PRECISIONS[1:]}; got {a.precisions!r}")
    skipped = {}
    try:
        levels: Optional[int] = activation_levels()
    except Int8Unavailable as err:
        precisions = [p for p in precisions if p != "int8"]
        skipped["int8"], levels = str(err), None
    if a.memory:
        report = {"machine": machine(1), "command": command("int8.py", hide={Path(a.text).name: str(a.text), "WORK": str(a.work)}),
                  "weights": a.weights or "embedded default", "text": a.text if a.text in ("books", "ud") else Path(a.text).name,
                  "sentences": len(sentences), "batch": a.batch, "memory": memory(model_path(a.weights, a.work), a.text, a.sentences, a.batch, precisions)}
        lines = [f"{report['weights']}, {len(sentences)} sentences of {report['text']}, batch {a.batch}, one thread, {report['machine'].get('cpu', '')}", "",
                 "| precision | peak RSS (MB) | after loading (MB) | resident after the run (MB) | float32 parameters kept (MB) |",
                 "| --- | --- | --- | --- | --- |"]
        lines += [f"| {p} | {m['peak_rss_mb']:,.0f} | {m['after_load_mb']:,.0f} | {m['resident_after_mb']:,.0f} | {m['float32_parameters_kept_mb']:,.0f} |"
                  for p, m in report["memory"].items()]
        write_results(a.json, report, "\n".join(lines))
        return
    quantize_seconds = None
    if "int8" in precisions:  # the one-off cost of quantizing the LSTM weights (at the first int8 call)
        bilm.set_inference_precision("int8")
        _, quantize_seconds = timed(bilm._int8.lstm.weights, bilm.lstm)
    outputs: Dict[str, Any] = {}
    configs = {p: (lambda p=p: run(bilm, sentences, p, a.batch, outputs)) for p in precisions}
    runs = interleaved(configs, a.repeats, label="precision")
    speed = {p: median_run(runs[p]) for p in precisions}
    results = {
        "machine": machine(a.threads),
        "command": command("int8.py", hide={Path(a.text).name: str(a.text), "WORK": str(a.work)}),
        "weights": a.weights or "embedded default",
        "text": a.text if a.text in ("books", "ud") else Path(a.text).name,
        "sentences": len(sentences),
        "tokens": sum(map(len, sentences)),
        "batch": a.batch,
        "int8_levels": levels,
        "int8_quantize_seconds": quantize_seconds,
        "skipped": skipped,
        "runs": runs,
        "tokens_per_s": {p: speed[p]["tokens_per_s"] for p in precisions},
        "speedup_vs_float32": {p: speed[p]["tokens_per_s"] / speed["float32"]["tokens_per_s"] for p in precisions},
        "tokens_per_cpu_s": {p: median_run(runs[p], "tokens_per_cpu_s")["tokens_per_cpu_s"] for p in precisions},
        "cosine_to_float32": {p: distance(outputs["float32"], outputs[p]) for p in precisions if p != "float32"},
    }
    write_results(a.json, results, markdown(results))


def markdown(r: Dict[str, Any]) -> str:
    lines = [
        f"{r['weights']}, {r['sentences']} sentences ({r['tokens']} tokens) of {r['text']}, batch {r['batch']}, {r['machine'].get('cpu', '')}",
        "",
        "| precision | tokens/s (wall) | vs float32 | tokens per CPU second | vs float32 | cosine to float32: mix mean / 1st pct | worst layer 1st pct |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p, tps in r["tokens_per_s"].items():
        cos = r["cosine_to_float32"].get(p)
        mix = f"{cos['mix']['mean']:.5f} / {cos['mix']['p1']:.5f}" if cos else "(reference)"
        worst = f"{min(v['p1'] for k, v in cos.items() if k != 'mix'):.5f}" if cos else ""
        cpu, cpu_ref = r["tokens_per_cpu_s"][p], r["tokens_per_cpu_s"]["float32"]
        lines.append(f"| {p} | {tps:,.0f} | {r['speedup_vs_float32'][p]:.2f}x | {cpu:,.0f} | {cpu / cpu_ref:.2f}x | {mix} | {worst} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
