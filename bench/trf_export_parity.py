#!/usr/bin/env python3
"""A transformer biLM trained here, exported to AllenNLP's format and read by allennlp-models itself.

    python bench/trf_export_parity.py MODEL_DIR --ref-python REF_VENV/bin/python --json bench/results/trf-export-parity.json

Writes ``MODEL_DIR`` (a transformer biLM saved by ``pretrain``/``finetune``) as the AllenNLP archive
``export`` writes, in both config shapes' loader (allennlp-models 2.10.1 reads the 2.x shape), loads
that archive with their ``BidirectionalLanguageModelTokenEmbedder`` (``bench/reference.py trf``) and
compares their default mix with ours from ``MODEL_DIR`` itself, on real text (UD EWT test, the
first ``--sentences`` sentences), float32 and float64: the largest absolute difference over every token.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import reference  # bench/reference.py: allennlp-models' side
from bench_common import command, machine, ud_path, ud_sentences, write_results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, help="a transformer biLM folder trained here")
    ap.add_argument("--ref-python", required=True, help="python of a venv with allennlp and allennlp-models 2.10.1")
    ap.add_argument("--sentences", type=int, default=200)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    import torch

    from spacy_elmo import load_bilm
    from spacy_elmo.bilm.scalar_mix import ScalarMix
    from spacy_elmo.bilm.transformer import TransformerBiLM
    from spacy_elmo.bilm.trf_export import write_trf_archive
    from spacy_elmo.hub.lm_head import NATIVE_SOFTMAX, read_native_head

    ours = load_bilm(args.model)
    if not isinstance(ours, TransformerBiLM):
        raise SystemExit(f"{args.model} is not a transformer biLM")
    lines = [[w.replace(" ", "_") for w in words] for words in ud_sentences(ud_path("test"), args.sentences, max_tokens=100)]
    results = {"machine": machine(threads=1), "command": command("trf_export_parity.py", {"REF_VENV/bin/python": args.ref_python}),
               "model": str(args.model), "sentences": len(lines), "tokens": sum(map(len, lines)), "max_abs_diff": {}}
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "lines.txt"
        text.write_text("".join(" ".join(words) + "\n" for words in lines), encoding="utf-8")
        head = read_native_head(args.model) if (args.model / NATIVE_SOFTMAX).is_file() else None
        archive = write_trf_archive(ours, Path(tmp) / "model.tar.gz", None if head is None else tuple(head))
        for precision in ("float32", "float64"):
            out = Path(tmp) / f"theirs-{precision}.npz"
            extra = ["--double"] if precision == "float64" else []
            reference.run(args.ref_python, "trf", "--archive", archive, "--input", text, "--out", out, *extra, env=dict(os.environ, OMP_NUM_THREADS="1"))
            theirs = np.load(out)
            model = ours.double() if precision == "float64" else ours.float()
            mix = ScalarMix(model.n_output_layers).to(torch.float64 if precision == "float64" else torch.float32)
            worst = 0.0
            with torch.no_grad():
                for i, words in enumerate(lines):
                    tokens = model.token_batch([words])
                    layers = model(tokens, boundaries=False)[:, 0, : len(words)]
                    worst = max(worst, float(np.abs(mix(layers).numpy() - theirs[str(i)]).max()))
            results["max_abs_diff"][precision] = worst
            print(f"{precision}: largest difference of the default mix, theirs (from our export) vs ours: {worst:.2e}", flush=True)
    m = results["machine"]
    table = (f"Machine: {m['cpu']}, torch {m['torch']}. Model: {args.model.name}; UD EWT test, {len(lines)} sentences. Command: `{results['command']}`.\n\n"
             "| float32 | float64 |\n| ---: | ---: |\n"
             f"| {results['max_abs_diff']['float32']:.1e} | {results['max_abs_diff']['float64']:.1e} |\n")
    write_results(args.json, results, table)


if __name__ == "__main__":
    main()
