#!/usr/bin/env python3
"""The compiled kernels on 1 and 2 threads: microseconds per call at the biLM's step shapes.

    python bench/kernel_threads.py            # about a minute
    python bench/kernel_threads.py --json bench/results/kernel-threads.json

For each kernel (the inference step in float32 and bfloat16, bf16 training's cell forward and
backward) and shape (rows x cell size of the original model and of the embedded default), the
time of one call with ``threads=1`` and with ``threads=2``, interleaved over ``--repeats``
rounds (median), plus what ``native.threads_for`` picks for that work: it starts a second
thread only where the second column wins. Needs a C compiler (the kernels are built on first use).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Callable, Dict, List

import torch
from bench_common import machine, per_call_us, write_results

from spacy_elmo.kernels import native

BF16, F32 = torch.bfloat16, torch.float32
SHAPES = [(64, 4096), (16, 4096), (4, 4096), (64, 512), (16, 512)]  # (rows, cell): original and default model


def calls(lib: native.NativeKernels, n: int, hid: int) -> Dict[str, Callable[[int], None]]:
    torch.manual_seed(0)
    out: Dict[str, Callable[[int], None]] = {}
    for dtype in (F32, BF16):
        step, rec = torch.randn(2, n, 4 * hid).to(dtype), torch.randn(2, n, 4 * hid).to(dtype)
        c, m, bias = torch.randn(2, n, hid), torch.empty(2, n, hid, dtype=dtype), torch.randn(2, 4 * hid)
        out[f"infer_{str(dtype)[6:]}"] = lambda t, a=(bias, step, rec, c, m): lib.infer_step(*a, 3.0, threads=t)
    z, c_prev = torch.randn(2, n, 4 * hid).to(BF16), torch.randn(2, n, hid)
    gates, c_new, tanh_c, m = torch.empty(2, n, 4 * hid), torch.empty(2, n, hid), torch.empty(2, n, hid), torch.empty(2, n, hid, dtype=BF16)
    out["train_forward_bf16"] = lambda t: lib.forward(z, c_prev, gates, c_new, tanh_c, m, 3.0, threads=t)
    lib.forward(z, c_prev, gates, c_new, tanh_c, m, 3.0)
    dm, dz, dc, grad_bias = torch.randn(2, n, hid).to(BF16), torch.empty(2, n, 4 * hid, dtype=BF16), torch.empty(2, n, hid), torch.zeros(2, 4 * hid)
    out["train_backward_bf16"] = lambda t: lib.backward(dm, gates, c_new, c_prev, tanh_c, None, 3.0, dz, dc, grad_bias, threads=t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    lib = native.library()
    if lib is None:
        raise SystemExit("the compiled kernels are unavailable (no C compiler, or SPACY_ELMO_NATIVE_KERNELS=0)")
    torch.set_num_threads(2)
    rows: List[Dict[str, object]] = []
    print("| kernel | rows x cell | 1 thread (us) | 2 threads (us) | picked |")
    print("| --- | --- | ---: | ---: | ---: |")
    for n, hid in SHAPES:
        for name, fn in calls(lib, n, hid).items():
            times: Dict[int, List[float]] = {1: [], 2: []}
            for _ in range(args.repeats):
                for threads in (1, 2):
                    times[threads].append(per_call_us(lambda: fn(threads), 2 * n * 4 * hid))
            one, two = statistics.median(times[1]), statistics.median(times[2])
            picked = native.threads_for(2 * n * 4 * hid)
            rows.append({"kernel": name, "rows": n, "cell": hid, "us_1_thread": one, "us_2_threads": two, "picked": picked})
            print(f"| {name} | {n} x {hid} | {one:.0f} | {two:.0f} | {picked} |", flush=True)
    if args.json:
        write_results(args.json, {"machine": machine(2), "rows": rows})


if __name__ == "__main__":
    main()
