#!/usr/bin/env python3
"""AllenNLP's own ELMo as the reference for bench/compare_allennlp.py (numerical parity) and
bench/bench.py (speed). It runs in a virtualenv of its own with AllenNLP 2.10.1, never in
spacy-elmo's, and imports nothing from spacy-elmo (only the bench harness, bench/bench_common.py, for its clock).

The reference environment (about 2 minutes from the package registry; one virtualenv, kept
outside the clone, here ``~/allennlp-ref``). AllenNLP 2.10.1 pins an old torch, so it is installed
without its dependencies and given the few modules its ELMo code imports:

    python3 -m venv ~/allennlp-ref
    ~/allennlp-ref/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    ~/allennlp-ref/bin/pip install --no-deps allennlp==2.10.1
    ~/allennlp-ref/bin/pip install torch==2.13.0 h5py numpy spacy "transformers<5" "huggingface_hub<1.0" \\
        cached-path lmdb dill base58 more-itertools fairscale

(``transformers<5`` and ``huggingface_hub<1.0``: allennlp imports names the newer ones dropped;
the other packages are what ``allennlp.common``/``allennlp.nn`` import at start-up; ``torch`` is
named again so that pip keeps the CPU build.) torchvision is not installed (only CUDA builds on
the registry); AllenNLP imports it in modules ELMo never uses, so this script registers empty
stand-ins for it when it is missing. Then:

    python bench/compare_allennlp.py --ref-python ~/allennlp-ref/bin/python
    python bench/bench.py --ref-python ~/allennlp-ref/bin/python

What it computes: ``_ElmoBiLm`` (AllenNLP's character encoder and LSTMs with projection) on the
whitespace-split lines of ``--input``, in file order, ``--batch-size`` lines at a time (blank lines
give zero tokens), with the LSTM state zeroed before each batch (``--stateful`` keeps AllenNLP's
carried state), and the sentence boundaries removed. ``--out FILE.npz``: key ``str(i)`` holds line
i's layers, float32 ``[n_layers + 1, n_tokens, 2 * projection_dim]`` (float64 with ``--double``).
``--bench``: times the whole input after one warm-up batch and prints one line
``ref tokens_per_s=... sentences=... tokens=... seconds=... batch_size=... threads=... peak_rss_mb=...``.
"""
from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import sys
import types
import warnings
from typing import Optional

from bench_common import peak_rss_mb, timed


def allennlp_elmo() -> types.SimpleNamespace:
    """AllenNLP's biLM and helpers, with stand-ins for a missing torchvision (see above)."""
    warnings.filterwarnings("ignore")
    if importlib.util.find_spec("torchvision") is None:
        for name in ("torchvision", "torchvision.ops", "torchvision.ops.boxes"):
            stand_in = types.ModuleType(name)
            # a spec, because newer transformers ask importlib.util.find_spec about torchvision
            stand_in.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules.setdefault(name, stand_in)
    import allennlp
    from allennlp.modules.elmo import _ElmoBiLm, batch_to_ids
    from allennlp.nn.util import remove_sentence_boundaries

    return types.SimpleNamespace(BiLm=_ElmoBiLm, batch_to_ids=batch_to_ids, strip=remove_sentence_boundaries, version=allennlp.__version__)


def read_lines(path: str) -> list:
    """Whitespace-split lines, blank ones kept (as bench/compare_allennlp.py reads them)."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r").split() for line in lines]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--options", required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--input", required=True, help="one whitespace-tokenized sentence per line")
    ap.add_argument("--out", help="write each line's layers to this .npz")
    ap.add_argument("--bench", action="store_true", help="time the whole input and print a 'ref ...' line")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--double", action="store_true", help="compute and store in float64 (a near-exact answer)")
    ap.add_argument("--stateful", action="store_true", help="carry the LSTM state across batches (AllenNLP's default)")
    args = ap.parse_args(argv)
    if not (args.out or args.bench):
        ap.error("give --out, --bench or both")
    if args.batch_size < 1:
        ap.error("--batch-size must be at least 1")

    import numpy as np
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    ref = allennlp_elmo()
    lines = read_lines(args.input)
    rows = [i for i, words in enumerate(lines) if words]
    batches = [rows[k : k + args.batch_size] for k in range(0, len(rows), args.batch_size)]
    bilm = ref.BiLm(args.options, args.weights)
    bilm.eval()
    if args.double:
        bilm.double()
    dtype = np.float64 if args.double else np.float32

    def run(selected: list, keep: Optional[dict] = None) -> None:
        for batch in selected:
            if not args.stateful:
                bilm._elmo_lstm.reset_states()
            out = bilm(ref.batch_to_ids([lines[i] for i in batch]))
            layers = torch.stack([ref.strip(a, out["mask"])[0] for a in out["activations"]], 1)
            if keep is not None:
                for j, i in enumerate(batch):
                    keep[str(i)] = layers[j, :, : len(lines[i])].numpy().astype(dtype, copy=True)

    with torch.inference_mode():
        if args.out:
            bilm._elmo_lstm.reset_states()
            arrays: dict = {}
            run(batches, arrays)
            with open(args.options, encoding="utf-8") as handle:
                lstm = json.load(handle)["lstm"]
            for i, words in enumerate(lines):
                if not words:  # a blank line: zero tokens
                    arrays[str(i)] = np.zeros((lstm["n_layers"] + 1, 0, 2 * lstm["projection_dim"]), dtype)
            np.savez(args.out, **arrays)
            print(f"wrote {args.out}: {len(lines)} lines, allennlp {ref.version}, torch {torch.__version__}", file=sys.stderr)
        if args.bench:
            bilm._elmo_lstm.reset_states()
            run(batches[:1])
            bilm._elmo_lstm.reset_states()
            _, seconds = timed(run, batches)
            tokens = sum(len(lines[i]) for i in rows)
            peak = peak_rss_mb()
            print(
                f"ref tokens_per_s={tokens / seconds:.1f} sentences={len(rows)} tokens={tokens} seconds={seconds:.3f} "
                f"batch_size={args.batch_size} threads={torch.get_num_threads()} peak_rss_mb={peak:.0f}"
            )


if __name__ == "__main__":
    main()
