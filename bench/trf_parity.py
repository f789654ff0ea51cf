"""Parity of the transformer biLM with allennlp-models 2.10.1 on the stored reference outputs.

Reads tests/data/trf/reference.npz (their ``BidirectionalLanguageModelTokenEmbedder``'s raw layers
and default mix, written by tests/data/trf/make_reference.py), writes the same seeded random
archives with ``write_random_trf``, and reports the largest difference per layer and for the mix, in
float64 and float32. ``python bench/trf_parity.py --json bench/results/trf-parity.json``.
"""
from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path

from bench_common import REPO, add_threads, command, machine, use_threads, write_results

REFERENCE = REPO / "tests" / "data" / "trf" / "reference.npz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write the results here (and a .md beside it)")
    add_threads(parser)
    args = parser.parse_args()
    use_threads(args.threads)
    import numpy as np
    import torch

    from spacy_elmo.bilm.scalar_mix import ScalarMix
    from spacy_elmo.bilm.trf_folder import load_trf
    from spacy_elmo.hub.trf_random import write_random_trf

    spec = importlib.util.spec_from_file_location("trf_cases", REPO / "tests" / "data" / "trf" / "cases.py")
    assert spec is not None and spec.loader is not None
    cases_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases_module)
    sentences, cases = cases_module.SENTENCES, cases_module.CASES
    reference = np.load(REFERENCE)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape, config_shape, legacy, seed in cases:
            model = load_trf(write_random_trf(Path(tmp) / shape, shape, config_shape, seed=seed, legacy=legacy))
            for dtype in ("float64", "float32"):
                run = model.double() if dtype == "float64" else model.float()
                with torch.no_grad():
                    ours = run.forward(run.token_batch(sentences), boundaries=False).numpy()
                    mix = ScalarMix(run.n_output_layers).to(getattr(torch, dtype))(torch.from_numpy(ours)).numpy()
                key = f"{shape}_{config_shape}/{dtype}"
                theirs, their_mix = reference[f"{key}/layers"], reference[f"{key}/mix"]
                lengths = reference["lengths"]
                per_layer = [max(float(np.abs(ours[k, b, :n] - theirs[k, b, :n]).max()) for b, n in enumerate(lengths)) for k in range(len(theirs))]
                mixed = max(float(np.abs(mix[b, :n] - their_mix[b, :n]).max()) for b, n in enumerate(lengths))
                rows.append({"archive": shape, "config": config_shape, "legacy_torch_format": legacy, "dtype": dtype, "layers": per_layer, "mix": mixed, "max": max(per_layer + [mixed])})
    table = "| archive | config | dtype | per layer | mix | max |\n|---|---|---|---|---|---|\n"
    table += "".join(f"| {r['archive']} | {r['config']} | {r['dtype']} | {', '.join(f'{x:.1e}' for x in r['layers'])} | {r['mix']:.1e} | {r['max']:.1e} |\n" for r in rows)
    write_results(args.json, {"command": command("trf_parity.py"), "machine": machine(args.threads), "reference": "allennlp-models 2.10.1", "rows": rows}, table)


if __name__ == "__main__":
    main()
