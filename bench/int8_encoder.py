#!/usr/bin/env python3
"""Ablation: the char-CNN token encoder's highway and projection products in int8, or float32.

    python bench/int8_encoder.py --weights elmo-original --text ud --sentences 320 --json bench/results/int8-encoder-original.json
    python bench/int8_encoder.py --text ud --sentences 320 --json bench/results/int8-encoder-default.json

``precision = "int8"`` quantizes the LSTM stack's products and, for a char CNN of
``int8.ENCODER_MIN_FILTERS`` filters or more (every published shape), the encoder's highway
(transform and carry as one product) and projection products (:func:`spacy_elmo.kernels.int8.encode_tokens`).
This measures both arms on any model, whatever the package chooses for it, with the token cache
off (every token encoded, as ``bench/int8.py`` and the AllenNLP headline run it):

* speed: tokens per CPU-second of ``embed_batch`` at ``--batch``, the two arms interleaved
  (``--repeats`` rounds; the median round reported);
* distance: per-token cosine to float32 (mean and 1st percentile), every layer and the layers' average.

The convolutions stay float32 in both arms. The arms differ only in whether the int8 weights hold
an encoder cache (``Int8Products.encoder``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch
from bench_common import WORK, add_threads, command, machine, random_weights, text_sentences, token_cosines, use_threads, write_results

ARMS = ("lstm", "lstm+encoder")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--weights", default=None, help="a model folder or a published shape (random weights); default: the embedded default"
    )
    parser.add_argument("--text", default="ud", help="books, ud or a file")
    parser.add_argument("--sentences", type=int, default=320)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--json", type=Path, default=None)
    add_threads(parser)
    args = parser.parse_args()
    use_threads(args.threads)
    from spacy_elmo import load_bilm
    from spacy_elmo.kernels import int8

    path = (
        None
        if args.weights is None
        else args.weights
        if Path(args.weights).exists()
        else str(random_weights(args.weights, args.work / f"random-{args.weights}"))
    )
    bilm = load_bilm(path) if path else load_bilm()
    bilm.token_cache = None  # every token encoded: what the encoder's products cost
    sentences = text_sentences(args.text, args.sentences)
    batches = [sentences[i : i + args.batch] for i in range(0, len(sentences), args.batch)]

    def embed(arm: str) -> List[np.ndarray]:
        if bilm.inference_precision == "int8":
            bilm._int8.encoder = encoder_cache if arm == "lstm+encoder" else None
        with torch.inference_mode():
            return [layers for batch in batches for layers in bilm.embed_batch(batch)]

    reference = embed("lstm")  # float32 first
    bilm.set_inference_precision("int8")
    encoder_cache = bilm._int8.encoder or int8.Int8EncoderCache()
    tokens = sum(len(s) for s in sentences)
    results: Dict[str, Any] = {
        "machine": machine(threads=args.threads),
        "command": command("int8_encoder.py"),
        "model": args.weights or "en_default (embedded)",
        "tokens": tokens,
        "arms": {},
    }
    for arm in ARMS:
        vectors = embed(arm)
        cos = token_cosines(vectors, reference)  # [layers, tokens]
        mix = token_cosines([v.mean(0, keepdims=True) for v in vectors], [r.mean(0, keepdims=True) for r in reference])[0]
        results["arms"][arm] = {
            "layers": [{"mean": float(c.mean()), "p1": float(np.percentile(c, 1))} for c in cos],
            "mix": {"mean": float(mix.mean()), "p1": float(np.percentile(mix, 1))},
            "rounds_tokens_per_cpu_s": [],
        }
    for _ in range(args.repeats):
        for arm in ARMS:
            start = time.process_time()
            embed(arm)
            results["arms"][arm]["rounds_tokens_per_cpu_s"].append(round(tokens / (time.process_time() - start), 1))
    for arm in ARMS:
        results["arms"][arm]["tokens_per_cpu_s"] = float(np.median(results["arms"][arm]["rounds_tokens_per_cpu_s"]))
    base = results["arms"]["lstm"]["tokens_per_cpu_s"]
    lines = [
        "| int8 products | tokens per CPU-second (median) | vs LSTM only | cosine to float32, layers' average: mean / 1st pct | layer 0: 1st pct |",
        "| --- | ---: | ---: | --- | ---: |",
    ]
    for arm in ARMS:
        r = results["arms"][arm]
        lines.append(
            f"| {arm} | {r['tokens_per_cpu_s']:,.0f} | {r['tokens_per_cpu_s'] / base:.3f}x | "
            f"{r['mix']['mean']:.5f} / {r['mix']['p1']:.5f} | {r['layers'][0]['p1']:.5f} |"
        )
    write_results(args.json, results, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
