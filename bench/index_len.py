"""The cost of ``len(TokenIndex)`` called after every added Doc (as the ``index`` command with
``--max-tokens`` does): 10,000 Docs of 20 tokens (dim 256), adding timed apart from ``len``.
``--checkout`` measures another checkout of the package (e.g. an older commit).

    python bench/index_len.py --out bench/results/index_len.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from bench_common import write_results

CHILD = r"""
import json, sys, time
import numpy as np
from spacy_elmo.senses.index import TokenIndex
docs, tokens = int(sys.argv[1]), int(sys.argv[2])
vectors = np.random.default_rng(0).normal(size=(tokens, 256)).astype(np.float32)
index = TokenIndex(store_context=False)
add = length = 0.0
for d in range(docs):
    t0 = time.perf_counter()
    index.add(vectors, [d] * tokens, [0] * tokens, list(range(tokens)), ["w"] * tokens)
    t1 = time.perf_counter()
    assert len(index) == (d + 1) * tokens
    length += time.perf_counter() - t1
    add += t1 - t0
print(json.dumps({"docs": docs, "tokens_per_doc": tokens, "add_seconds": round(add, 3), "len_seconds": round(length, 4)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--checkout", default=str(REPO), help="the checkout of spacy_elmo to measure")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    result = subprocess.run([sys.executable, "-c", CHILD, str(args.docs), str(args.tokens)], capture_output=True, text=True,
                            check=True, env={"PYTHONPATH": args.checkout, "OMP_NUM_THREADS": "1", "PATH": ""},
                            cwd=args.checkout).stdout  # cwd: `-c` puts it first on sys.path
    row = json.loads(result)
    row["checkout"] = "this repository" if Path(args.checkout).resolve() == REPO else "another checkout (--checkout)"
    print(json.dumps(row))
    if args.out:
        write_results(args.out, row)


if __name__ == "__main__":
    main()
