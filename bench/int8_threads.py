#!/usr/bin/env python3
"""Where a second thread's gain goes: each LSTM product of the original shapes, float32 and int8,
at one and at two intra-op threads (and int8 as two Python threads of one intra-op thread each,
one per direction, as the two directions could run).

    python bench/int8_threads.py --json bench/results/int8-threads.json

Run it with both cores idle: a second thread that shares its core measures the other job.
Per product, the median of ``--repeats`` timings of ``--calls`` calls; float32 is the package's
routed product (``matmul.linear``), int8 :func:`spacy_elmo.kernels.int8.linear`.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import torch
from bench_common import command, machine, write_results

#: (name, rows, in, out): the original model's three LSTM products at batch 64
SHAPES = [("recurrent", 64, 512, 16384), ("projection", 64, 4096, 512), ("input (a group of 8 steps)", 512, 512, 16384)]


def median_seconds(fn: Callable[[], None], repeats: int) -> float:
    """Median seconds of ``fn`` over ``repeats`` runs (after one warm-up)."""
    fn()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20, help="products per timing, per direction")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from spacy_elmo.kernels import int8, matmul

    levels = int8.activation_levels()
    torch.manual_seed(0)
    results: Dict[str, Any] = {"machine": machine(threads=2), "command": command("int8_threads.py"), "products": {}}
    lines = [
        "| product | float32 ms: 1 -> 2 threads (scaling) | int8 ms: 1 -> 2 threads (scaling) | int8, two Python threads of 1 (scaling) |",
        "| --- | --- | --- | --- |",
    ]
    for name, rows, n_in, n_out in SHAPES:
        weights = [torch.randn(n_in, n_out) * n_in**-0.5 for _ in range(2)]  # one per direction
        quantized = [int8.QuantizedWeight(w) for w in weights]
        inputs = [torch.randn(rows, n_in) for _ in range(2)]

        def run_float(d: int) -> None:
            for _ in range(args.calls):
                matmul.linear(inputs[d], weights[d])

        def run_int8(d: int) -> None:
            for _ in range(args.calls):
                int8.linear(inputs[d], quantized[d], levels)

        def both(run: Callable[[int], None]) -> Callable[[], None]:
            def go() -> None:
                run(0)
                run(1)

            return go

        def concurrent(run: Callable[[int], None]) -> Callable[[], None]:
            def go() -> None:
                workers: List[threading.Thread] = [threading.Thread(target=run, args=(d,)) for d in (0, 1)]
                for w in workers:
                    w.start()
                for w in workers:
                    w.join()

            return go

        row: Dict[str, float] = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            row[f"float32_t{threads}"] = median_seconds(both(run_float), args.repeats)
            row[f"int8_t{threads}"] = median_seconds(both(run_int8), args.repeats)
        torch.set_num_threads(1)
        row["int8_two_python_threads"] = median_seconds(concurrent(run_int8), args.repeats)
        per_call = {k: v / (2 * args.calls) * 1e3 for k, v in row.items()}
        results["products"][name] = {"ms_per_product": per_call, "rows": rows, "in": n_in, "out": n_out}
        f1, f2, q1, q2, qp = (per_call[k] for k in ("float32_t1", "float32_t2", "int8_t1", "int8_t2", "int8_two_python_threads"))
        lines.append(
            f"| {name} | {f1:.2f} -> {f2:.2f} ({f1 / f2:.2f}x) | {q1:.2f} -> {q2:.2f} ({q1 / q2:.2f}x) | {qp:.2f} ({q1 / qp:.2f}x) |"
        )
    write_results(args.json, results, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
