#!/usr/bin/env python3
"""The transformer ELMo's speed: ours against allennlp-models' own embedder, and against the LSTM original.

    python bench/trf_speed.py --ref-python REF_VENV/bin/python --sentences 300 --repeats 3 --json bench/results/trf-speed.json

On real held-out text (UD EWT test, the first ``--sentences`` sentences in file order), one thread,
batch 64 in input order, every configuration in a fresh process, in turns over ``--repeats``
rounds: allennlp-models 2.10.1's ``BidirectionalLanguageModelTokenEmbedder`` (``bench/reference.py
trf``, in the reference virtualenv: recipe in docs/benchmarks.md, plus ``allennlp-models==2.10.1``
installed ``--no-deps``); our transformer biLM (``embed_sentences``); the ``elmo`` component over the
same sentences at batch 64 and at ``nlp.pipe``'s default batch (1000); the LSTM original (our
``embed_sentences``); ours each in float32 and bfloat16 (``precision = "bfloat16"``), the
transformer also in int8 (``precision = "int8"``, its error against float32 measured on the same
text first: per-token cosine of the default mix and of every layer, mean and 1st percentile). Both models have the published shapes (the transformer ELMo's 6
layers of width 512, feed-forward 2048, 7 character filters up to 1024; the original ELMo's
4096/512) with random weights (``write_random_trf``, ``random-weights elmo-original``): the
published transformer archive is not downloaded here, and the speed does not depend on the values.
Before timing, both sides embed the sentences once and their default mixes are compared (the
largest absolute difference, float32).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any, Dict

import numpy as np
import reference  # bench/reference.py: allennlp-models' side
from bench_common import WORK, command, interleaved, machine, random_weights, ud_path, ud_sentences, write_results

from bench import run_worker


def reference_speed(ref_python: str, archive: Path, sentences: Path, batch: int) -> Dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return reference.speed(reference.run(ref_python, "trf", "--archive", archive, "--input", sentences, "--bench", "--batch-size", batch, env=env))


def parity(ref_python: str, archive: Path, sentences: Path) -> float:
    """The largest absolute difference between their default mix and ours over every token."""
    from spacy_elmo import load_bilm
    from spacy_elmo.bilm.scalar_mix import ScalarMix

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "theirs.npz"
        reference.run(ref_python, "trf", "--archive", archive, "--input", sentences, "--out", out, env=dict(os.environ, OMP_NUM_THREADS="1"))
        theirs = np.load(out)
        lines = [line.split() for line in sentences.read_text(encoding="utf-8").splitlines()]
        bilm = load_bilm(archive)
        mix = ScalarMix(bilm.n_output_layers)
        import torch

        worst = 0.0
        for i, layers in enumerate(bilm.embed_sentences(lines, batch_size=64)):
            with torch.no_grad():
                ours = mix(torch.from_numpy(layers)).numpy()
            worst = max(worst, float(np.abs(ours - theirs[str(i)]).max()))
    return worst


def int8_error(archive: Path, lines: Any) -> Dict[str, Any]:
    """Per-token cosine between the int8 and float32 outputs, default mix and each layer: mean and 1st percentile."""
    from spacy_elmo import load_bilm

    bilm = load_bilm(archive)
    exact = bilm.embed_sentences(lines, batch_size=64)
    bilm.set_inference_precision("int8")
    low = bilm.embed_sentences(lines, batch_size=64)

    def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)

    layers = np.concatenate([cosines(x, y) for x, y in zip(low, exact)], axis=1)  # [L+1, tokens]
    mix = np.concatenate([cosines(x.mean(0), y.mean(0)) for x, y in zip(low, exact)])
    return {
        "default_mix": {"mean": float(mix.mean()), "p1": float(np.percentile(mix, 1))},
        "layers": [{"mean": float(c.mean()), "p1": float(np.percentile(c, 1))} for c in layers],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref-python", required=True, help="python of a venv with allennlp and allennlp-models 2.10.1")
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from spacy_elmo.hub.trf_random import write_random_trf

    work = WORK / "trf-speed"
    work.mkdir(parents=True, exist_ok=True)
    archive = work / "trf-published"
    if not (archive / "weights.th").is_file():
        write_random_trf(archive, "published", "2.x", seed=1)
    lstm = random_weights("elmo-original", work / "elmo-original")
    lines = [[w.replace(" ", "_") for w in words] for words in ud_sentences(ud_path("test"), args.sentences, max_tokens=100)]
    sentences = work / f"ud-test-{args.sentences}.txt"
    sentences.write_text("".join(" ".join(words) + "\n" for words in lines), encoding="utf-8")
    tokens = sum(map(len, lines))
    worst = parity(args.ref_python, archive, sentences)
    print(f"default mix, ours vs theirs: largest difference {worst:.2e}", flush=True)
    error = int8_error(archive, lines)
    print(f"int8 against float32, default mix: cosine mean {error['default_mix']['mean']:.5f}, 1st percentile {error['default_mix']['p1']:.5f}", flush=True)
    base = {"sentences": str(sentences), "threads": 1, "macs": {"encoder": 0.0, "lstm": 0.0, "total": 0.0}}
    configs = {
        "allennlp_models": lambda: reference_speed(args.ref_python, archive, sentences, 64),
        "transformer": lambda: run_worker({**base, "model": str(archive), "kind": "bilm", "batch_size": 64, "input_order": True}),
        "transformer_bfloat16": lambda: run_worker(
            {**base, "model": str(archive), "kind": "bilm", "batch_size": 64, "input_order": True, "precision": "bfloat16"}
        ),
        "transformer_int8": lambda: run_worker(
            {**base, "model": str(archive), "kind": "bilm", "batch_size": 64, "input_order": True, "precision": "int8"}
        ),
        "transformer_component": lambda: run_worker({**base, "model": str(archive), "kind": "pipe", "batch_size": 64, "cache": 0}),
        "transformer_component_defaults": lambda: run_worker({**base, "model": str(archive), "kind": "pipe", "batch_size": 1000, "cache": 0}),
        "lstm_original": lambda: run_worker({**base, "model": str(lstm), "kind": "bilm", "batch_size": 64, "input_order": True}),
        "lstm_original_bfloat16": lambda: run_worker(
            {**base, "model": str(lstm), "kind": "bilm", "batch_size": 64, "input_order": True, "precision": "bfloat16"}
        ),
    }
    runs = interleaved(configs, args.repeats)
    medians = {name: statistics.median(r["tokens_per_s"] for r in measured) for name, measured in runs.items()}
    results = {
        "machine": machine(threads=1),
        "command": command("trf_speed.py", {"REF_VENV/bin/python": args.ref_python}),
        "text": {"source": "UD EWT test", "sentences": len(lines), "tokens": tokens},
        "parity_max_abs_diff_float32": worst,
        "int8_cosine_to_float32": error,
        "tokens_per_s": medians,
        "runs": {name: [round(r["tokens_per_s"], 1) for r in measured] for name, measured in runs.items()},
        "peak_rss_mb": {name: statistics.median(r.get("peak_rss_mb", 0.0) for r in measured) for name, measured in runs.items()},
        "speedup_vs_allennlp_models": {name: medians[name] / medians["allennlp_models"] for name in medians if name != "allennlp_models"},
        "transformer_vs_lstm_original": {
            "float32": medians["transformer"] / medians["lstm_original"],
            "bfloat16": medians["transformer_bfloat16"] / medians["lstm_original_bfloat16"],
        },
    }
    m = results["machine"]
    v, s = medians, results["speedup_vs_allennlp_models"]
    table = "\n".join(
        [
            f"Machine: {m['cpu']}, 1 thread, torch {m['torch']}. Text: UD EWT test, {len(lines):,} sentences, {tokens:,} tokens; published shapes, "
            f"random weights, batch 64 in input order. Command: `{results['command']}`. Default mix, ours against theirs: largest difference {worst:.1e}.",
            "",
            "| allennlp-models 2.10.1 | ours, transformer | the same, bfloat16 | the same, int8 | through the component | the component, nlp.pipe's default batch "
            "| ours, LSTM original | the same, bfloat16 |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {v['allennlp_models']:.0f} | {v['transformer']:.0f} ({s['transformer']:.2f}x) | {v['transformer_bfloat16']:.0f} "
            f"({s['transformer_bfloat16']:.2f}x) | {v['transformer_int8']:.0f} ({s['transformer_int8']:.2f}x) | {v['transformer_component']:.0f} "
            f"({s['transformer_component']:.2f}x) | {v['transformer_component_defaults']:.0f} ({s['transformer_component_defaults']:.2f}x) | "
            f"{v['lstm_original']:.0f} | {v['lstm_original_bfloat16']:.0f} |",
            "",
            "tokens/s, median of the rounds; ratios to allennlp-models in the same run. int8 against float32, per token: default mix "
            f"cosine {error['default_mix']['mean']:.5f} on average, {error['default_mix']['p1']:.5f} at the 1st percentile.",
        ]
    )
    write_results(args.json, results, table + "\n")


if __name__ == "__main__":
    main()
