#!/usr/bin/env python3
"""spacy-elmo against AllenNLP 2.10.1 on real text, original ELMo shapes: the speed headline.

    python bench/allennlp_speed.py --ref-python REF_VENV/bin/python --text ud --sentences 1000 --threads 1,2 --repeats 3

For each thread count, ``--repeats`` rounds, each running every configuration once in a fresh
process, in the same order (so the machine's drift hits all of them alike); each figure is the
median round. Batches of 64 sentences in input order (each batch sorted by length inside, as
``nlp.pipe`` batches), random weights of the original shapes (seed 1), token cache off, so the
biLM itself is measured:

* ``allennlp``: AllenNLP's ``_ElmoBiLm`` (``bench/reference.py allennlp``), float32; ``allennlp_b256``
  the same with batches of 256 sentences (what a bigger batch buys it);
* ``float32`` / ``bfloat16``: ``BiLM.iter_embeddings`` in each precision;
* ``component_bfloat16``: ``nlp.pipe`` with the ``elmo`` component (``precision = "bfloat16"``,
  ``token_cache_size = 0``, its other defaults), pre-tokenised Docs, 64 per batch;
  ``component_bfloat16_defaults``: the same with ``nlp.pipe``'s default batch of 1,000 Docs, so the
  component's own batching (``max_batch_tokens = 4096``) decides the biLM's batches.

Also the machine's matrix-product rate (float32 2048^3 and bfloat16 at the recurrent step's
shape) and the compute roof: tokens/s if every nominal multiply-add of the original model ran at
the float32 rate. Results: ``bench/results/allennlp-speed.{json,md}``. Needs the AllenNLP
reference virtualenv (recipe: docs/benchmarks.md) and, for ``--text ud|books``, the project's
data (like bench/bench.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Dict

import bench  # bench/bench.py: inputs, workers, the AllenNLP runner
from bench_common import RESULTS, WORK, command, gemm_gflops, interleaved, machine, use_threads, write_results

CONFIGS = ("allennlp", "allennlp_b256", "float32", "bfloat16", "component_bfloat16", "component_bfloat16_defaults")


def gemm_rates(threads: int) -> Dict[str, float]:
    """GFLOP/s of float32 at 2048^3 and of the recurrent product ``[64, 512] x [512, 16384]`` in
    float32 and bfloat16 (the package's routed products), in this process."""
    use_threads(threads)
    return {"fp32_2048": gemm_gflops(2048, 2048, 2048, routed=True), "fp32_step": gemm_gflops(64, 512, 16384, routed=True),
            "bf16_step": gemm_gflops(64, 512, 16384, "bfloat16", routed=True)}


def run(config: str, model: Path, sentences: Path, threads: int, ref_python: str) -> Dict[str, Any]:
    base = {"model": str(model), "sentences": str(sentences), "threads": threads, "macs": bench.macs_per_token(json.loads((model / "options.json").read_text()))}
    if config.startswith("allennlp"):
        return bench.run_reference(ref_python, model, sentences, 256 if config == "allennlp_b256" else 64, threads)
    if config in ("float32", "bfloat16"):
        return bench.run_worker({**base, "kind": "bilm", "batch_size": 64, "input_order": True, "precision": config})
    batch = 1000 if config == "component_bfloat16_defaults" else 64
    return bench.run_worker({**base, "kind": "pipe", "batch_size": batch, "precision": "bfloat16", "cache": 0, "max_batch_tokens": 4096})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref-python", required=True, help="python of the AllenNLP 2.10.1 virtualenv")
    ap.add_argument("--text", default="ud", choices=["ud", "books", "synthetic"])
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work-dir", type=Path, default=WORK)
    ap.add_argument("--out", type=Path, default=RESULTS / "allennlp-speed.json")
    args = ap.parse_args()

    args.work_dir.mkdir(parents=True, exist_ok=True)
    paths = bench.make_inputs(args.work_dir, ["original"], args.sentences, args.text)
    model, sentences = paths["original"], paths["sentences"]
    lines = [line.split() for line in sentences.read_text(encoding="utf-8").splitlines()]
    macs = bench.macs_per_token(json.loads((model / "options.json").read_text()))
    results: Dict[str, Any] = {
        "machine": machine(),  # the thread counts: under "threads"
        "text": {"source": args.text, "sentences": len(lines), "tokens": sum(map(len, lines))},
        "command": command("allennlp_speed.py", {"REF_VENV/bin/python": args.ref_python}),
        "macs_per_token": macs,
        "threads": {},
    }
    for threads in (int(t) for t in args.threads.split(",")):
        rates = gemm_rates(threads)
        runs = interleaved({c: lambda c=c: run(c, model, sentences, threads, args.ref_python) for c in CONFIGS}, args.repeats, f"threads {threads} ")
        medians = {config: statistics.median(r["tokens_per_s"] for r in measured) for config, measured in runs.items()}
        roof = rates["fp32_2048"] * 1e9 / (2 * macs["total"])
        results["threads"][str(threads)] = {
            "gemm_gflops": rates,
            "roof_tokens_per_s": roof,
            "tokens_per_s": medians,
            "runs": {config: [round(r["tokens_per_s"], 1) for r in measured] for config, measured in runs.items()},
            "peak_rss_mb": {config: statistics.median(r["peak_rss_mb"] for r in measured) for config, measured in runs.items()},
            "speedup": {config: medians[config] / medians["allennlp"] for config in CONFIGS if config != "allennlp"},
            "fraction_of_roof": {config: medians[config] / roof for config in CONFIGS},
        }
    write_results(args.out, results, markdown(results))


def markdown(results: Dict[str, Any]) -> str:
    m, t = results["machine"], results["text"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}. Text: {t['source']}, {t['sentences']:,} sentences, "
        f"{t['tokens']:,} tokens; original shapes, random weights, batch 64 in input order, token cache off. "
        f"Command: `{results['command']}`.",
        "",
        "| threads | AllenNLP 2.10.1 (batch 256) | float32 | bfloat16 | bfloat16 through the component | the same, nlp.pipe's default batch | float32 roof (2048^3 rate) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for threads, r in results["threads"].items():
        s, v = r["speedup"], r["tokens_per_s"]
        lines.append(
            f"| {threads} | {v['allennlp']:.0f} ({v['allennlp_b256']:.0f}) | {v['float32']:.0f} ({s['float32']:.2f}x) | {v['bfloat16']:.0f} ({s['bfloat16']:.2f}x) | "
            f"{v['component_bfloat16']:.0f} ({s['component_bfloat16']:.2f}x) | {v['component_bfloat16_defaults']:.0f} ({s['component_bfloat16_defaults']:.2f}x) | "
            f"{r['roof_tokens_per_s']:.0f} ({r['gemm_gflops']['fp32_2048']:.0f} GFLOP/s) |"
        )
    lines.append("")
    lines.append("tokens/s, median of the rounds (each round runs every column once, in turn); ratios to AllenNLP at batch 64 in the same run.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
