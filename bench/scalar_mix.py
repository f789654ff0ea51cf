#!/usr/bin/env python3
"""Forward + backward time of the ``spacy-elmo.ScalarMix.v1`` thinc layer per training batch.

A batch is ``--docs`` Docs of ``--tokens`` tokens each, ``[L+1, tokens, dim]`` float32 layers per
Doc, as the listener hands them to the mix. Shapes: the embedded default (3 layers x 256) and
the published "original" (3 x 1024), with and without layer norm, dropout 0.1 and l2 0.001 as a
tagger would train them. One thread; the figure is the median over ``--repeats`` timed batches
after two warm-up ones.

    python bench/scalar_mix.py [--docs 64] [--tokens 25] [--repeats 50] [--label NAME] [--output FILE]

The layer is built by its registered name, so the same script times any implementation of it.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from spacy.util import registry  # noqa: E402

import spacy_elmo  # noqa: E402,F401  (registers the architectures)
from bench_common import write_results  # noqa: E402

SHAPES = [("en_default", 3, 256), ("original", 3, 1024)]


def time_one(n_layers: int, dim: int, layer_norm: bool, docs: int, tokens: int, repeats: int) -> Dict[str, Any]:
    rng = np.random.default_rng(0)
    layers = [rng.normal(size=(n_layers, tokens, dim)).astype(np.float32) for _ in range(docs)]
    d_out = [rng.normal(size=(tokens, dim)).astype(np.float32) for _ in range(docs)]
    model = registry.architectures.get("spacy-elmo.ScalarMix.v1")(init="average", layer_norm=layer_norm, dropout=0.1, l2=0.001)
    model.initialize(X=layers[:1])
    times: List[float] = []
    for step in range(repeats + 2):
        start = time.perf_counter()
        _, backprop = model.begin_update(layers)
        d_layers = backprop(d_out)
        elapsed = time.perf_counter() - start
        assert len(d_layers) == docs and d_layers[0].shape == layers[0].shape
        for name in ("s", "gamma"):
            model.set_grad(name, model.ops.alloc1f(model.get_param(name).shape[0]))
        if step >= 2:
            times.append(elapsed)
    return {"n_layers": n_layers, "dim": dim, "layer_norm": layer_norm, "ms_per_batch": round(1000 * statistics.median(times), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--label", default="current")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [
        time_one(n_layers, dim, layer_norm, args.docs, args.tokens, args.repeats) | {"shape": name}
        for name, n_layers, dim in SHAPES
        for layer_norm in (False, True)
    ]
    result = {
        "label": args.label,
        "batch": {"docs": args.docs, "tokens_per_doc": args.tokens},
        "threads": 1,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "rows": rows,
    }
    for row in rows:
        print(f"{args.label:>12} {row['shape']:>10} {row['n_layers']}x{row['dim']:<5} layer_norm={row['layer_norm']!s:<5} {row['ms_per_batch']:8.3f} ms/batch")
    if args.output:
        write_results(args.output, result)


if __name__ == "__main__":
    main()
