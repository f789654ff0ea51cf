#!/usr/bin/env python3
"""ELMoForManyLangs' own package as the reference for bench/efml_parity.py (numerical parity and
speed). It runs in a virtualenv of its own with ``elmoformanylangs`` from the package registry,
never in spacy-elmo's, and imports nothing from spacy-elmo.

The reference environment (about a minute; one virtualenv kept outside the clone, here
``~/efml-ref``). The package declares torch, h5py, numpy and overrides without versions, and its
``@overrides`` decorators fail at import under overrides 4 and later, so it is installed without
its dependencies and given them, overrides pinned:

    python3 -m venv ~/efml-ref
    ~/efml-ref/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    ~/efml-ref/bin/pip install --no-deps elmoformanylangs==0.0.4.post2
    ~/efml-ref/bin/pip install torch==2.13.0 numpy h5py "overrides<4"

(``torch`` is named again so that pip keeps the CPU build.) Then:

    python bench/efml_parity.py --ref-python ~/efml-ref/bin/python

What it computes: their ``Embedder`` on the sentences of ``--input`` (a JSON list of token lists),
``--batch-size`` sentences a call in input order, through ``Embedder.sents2elmo``, the entry point
their documentation gives. Their encoder carries its LSTM state from call to call and their
batches run in a random order, so by default the state is reset before every call (each call is
then one batch that starts from zeros, as their first batch does); ``--stateful`` keeps it.
``--out FILE.npz``: key ``all/i`` holds sentence i's ``output_layer=-2`` array ``[L+1, n, 2P]``,
``avg/i`` its ``output_layer=-1`` array ``[n, 2P]`` (not with ``--stateful``, nor for an empty
sentence, where their average divides by zero); float64 with
``--double`` (the model cast with ``.double()``). ``--bench``: times ``sents2elmo`` on the whole
input in one call (their sorting and batching) after one warm-up call, and prints one line
``ref tokens_per_s=... sentences=... tokens=... seconds=... batch_size=... threads=... peak_rss_mb=...``.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import time
import warnings


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="an ELMoForManyLangs model folder")
    ap.add_argument("--input", required=True, help="a JSON list of sentences, each a list of tokens")
    ap.add_argument("--out", help="write each sentence's outputs to this .npz")
    ap.add_argument("--bench", action="store_true", help="time the whole input and print a 'ref ...' line")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--double", action="store_true", help="compute and store in float64")
    ap.add_argument("--stateful", action="store_true", help="carry the LSTM state from call to call (their default)")
    args = ap.parse_args(argv)
    if not (args.out or args.bench):
        ap.error("give --out, --bench or both")
    if args.batch_size < 1:
        ap.error("--batch-size must be at least 1")

    warnings.filterwarnings("ignore")
    logging.getLogger("elmoformanylangs").setLevel(logging.WARNING)
    import numpy as np
    import torch
    from elmoformanylangs import Embedder

    torch.set_num_threads(args.threads)
    with open(args.input, encoding="utf-8") as handle:
        sentences = json.load(handle)
    embedder = Embedder(args.model, batch_size=args.batch_size)
    if args.double:
        embedder.model.double()
    encoder = embedder.model.encoder
    groups = [list(range(k, min(k + args.batch_size, len(sentences)))) for k in range(0, len(sentences), args.batch_size)]

    def call(indices, output_layer):
        if not args.stateful:
            encoder.reset_states()
        return embedder.sents2elmo([sentences[i] for i in indices], output_layer=output_layer)

    with torch.no_grad():
        if args.out:
            encoder.reset_states()
            arrays = {}
            for group in groups:
                for i, array in zip(group, call(group, -2)):
                    arrays[f"all/{i}"] = np.asarray(array)
            if not args.stateful:  # their average fails on an empty sentence (numpy divides by zero): those are left out
                for group in groups:
                    filled = [i for i in group if sentences[i]]
                    for i, array in zip(filled, call(filled, -1) if filled else []):
                        arrays[f"avg/{i}"] = np.asarray(array)
            np.savez(args.out, **arrays)
            version = getattr(sys.modules.get("elmoformanylangs"), "__version__", "0.0.4.post2")
            print(f"wrote {args.out}: {len(sentences)} sentences, elmoformanylangs {version}, torch {torch.__version__}", file=sys.stderr)
        if args.bench:
            encoder.reset_states()
            embedder.sents2elmo(sentences[: args.batch_size], output_layer=-2)
            encoder.reset_states()
            start = time.perf_counter()
            embedder.sents2elmo(sentences, output_layer=-2)
            seconds = time.perf_counter() - start
            tokens = sum(len(s) for s in sentences)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            print(
                f"ref tokens_per_s={tokens / seconds:.1f} sentences={len(sentences)} tokens={tokens} seconds={seconds:.3f} "
                f"batch_size={args.batch_size} threads={torch.get_num_threads()} peak_rss_mb={peak:.0f}"
            )


if __name__ == "__main__":
    main()
