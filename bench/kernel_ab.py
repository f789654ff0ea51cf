#!/usr/bin/env python3
"""Two versions of the compiled kernels' C source, interleaved in one process: microseconds per call.

    git show main:spacy_elmo/kernels/csrc/train_kernels.c > before.c
    python bench/kernel_ab.py before.c spacy_elmo/kernels/csrc/train_kernels.c --json bench/results/kernel-ab.json

Each source is compiled with the package's flags for this machine (``build.current_build``) and
loaded side by side (``ctypes``, local symbols); the entry points' C signatures must be the same
in both (the return value is ignored). For each kernel and shape of ``bench/kernel_threads.py``,
the two libraries are timed in alternation, ``--rounds`` times, on the same tensors and
``--threads`` threads; the median per call of each is printed with their ratio. Alternating
in one process keeps the machine's load (shared, other jobs) the same for both sides.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernel_threads import SHAPES, per_call_us  # noqa: E402  (this folder: the same shapes and timing)

from spacy_elmo.kernels import build  # noqa: E402

I64, F32, P = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
PAIR = ctypes.POINTER(ctypes.c_void_p)


def compile_source(source: Path, out: Path) -> ctypes.CDLL:
    cc = build.compiler()
    if cc is None:
        raise SystemExit("needs a C compiler")
    flags, _ = build.current_build(cc)
    obj = out.with_suffix(".o")
    subprocess.run([cc, *flags, "-c", "-o", str(obj), str(source)], check=True)
    subprocess.run([cc, *build.LINK_FLAGS, "-o", str(out), str(obj), "-lm"], check=True)
    lib = ctypes.CDLL(str(out))
    for suffix in ("bf16", "f32"):
        getattr(lib, f"cell_forward_{suffix}").argtypes = [I64, I64] + [P, I64] * 6 + [F32, I64]
        getattr(lib, f"cell_backward_{suffix}").argtypes = [I64, I64, I64] + [P, I64] * 6 + [F32, P, I64, P, I64, P, I64]
        getattr(lib, f"lstm_step_infer_{suffix}").argtypes = [I64, I64, P, PAIR, PAIR, PAIR, PAIR, PAIR, F32, I64]
    return lib


def _pair(x: torch.Tensor):
    return (ctypes.c_void_p * 2)(x[0].data_ptr(), x[1].data_ptr())


def calls(n: int, hid: int, threads: int) -> Dict[str, Callable[[ctypes.CDLL], None]]:
    """One call per kernel on fixed tensors, as ``fn(library)``."""
    torch.manual_seed(0)
    out: Dict[str, Callable[[ctypes.CDLL], None]] = {}
    keep: List[object] = []
    for dtype, suffix in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        step, rec = torch.randn(2, n, 4 * hid).to(dtype), torch.randn(2, n, 4 * hid).to(dtype)
        c, m, bias = torch.randn(2, n, hid), torch.empty(2, n, hid, dtype=dtype), torch.randn(2, 4 * hid)
        pairs = [_pair(step), None, _pair(rec), _pair(c), _pair(m)]
        keep += [step, rec, c, m, bias, pairs]
        name = f"lstm_step_infer_{suffix}"
        out[f"infer_{str(dtype)[6:]}"] = lambda lib, name=name, bias=bias, pairs=pairs: getattr(lib, name)(
            n, hid, bias.data_ptr(), *pairs, 3.0, threads
        )
    z, c_prev = torch.randn(2, n, 4 * hid).to(torch.bfloat16), torch.randn(2, n, hid)
    gates, c_new, tanh_c = torch.empty(2, n, 4 * hid), torch.empty(2, n, hid), torch.empty(2, n, hid)
    m = torch.empty(2, n, hid, dtype=torch.bfloat16)
    forward = [z, c_prev, gates, c_new, tanh_c, m]
    forward_args = [v for x in forward for v in (x.data_ptr(), x.stride(0))]
    out["train_forward_bf16"] = lambda lib: lib.cell_forward_bf16(n, hid, *forward_args, 3.0, threads)
    dm, dz, dc = torch.randn(2, n, hid).to(torch.bfloat16), torch.empty(2, n, 4 * hid, dtype=torch.bfloat16), torch.empty(2, n, hid)
    grad_bias = torch.zeros(2, 4 * hid)
    head = [v for x in (dm, gates, c_new, c_prev, tanh_c) for v in (x.data_ptr(), x.stride(0))]
    tail = [dz.data_ptr(), dz.stride(0), dc.data_ptr(), dc.stride(0), grad_bias.data_ptr()]
    out["train_backward_bf16"] = lambda lib: lib.cell_backward_bf16(n, 0, hid, *head, None, 0, 3.0, *tail, threads)
    keep += [z, c_prev, gates, c_new, tanh_c, m, dm, dz, dc, grad_bias]
    out["_keep"] = lambda lib, keep=keep: None  # the tensors live as long as the calls
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path, help="the first C source (e.g. the main branch's train_kernels.c)")
    ap.add_argument("after", type=Path, help="the second C source")
    ap.add_argument("--rounds", type=int, default=7, help="alternations of the two libraries per kernel and shape")
    ap.add_argument("--threads", type=int, default=1, help="threads each call runs on")
    ap.add_argument("--kernels", nargs="*", help="only these kernels (e.g. infer_float32); default: all")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="kernel-ab-") as scratch:
        libs = {
            side: compile_source(source, Path(scratch) / f"{side}.so") for side, source in (("before", args.before), ("after", args.after))
        }
        rows: List[Dict[str, object]] = []
        print("| kernel | rows x cell | before (us) | after (us) | after / before |")
        print("| --- | --- | ---: | ---: | ---: |")
        for n, hid in SHAPES:
            for name, fn in calls(n, hid, args.threads).items():
                if name.startswith("_") or (args.kernels and name not in args.kernels):
                    continue
                times: Dict[str, List[float]] = {"before": [], "after": []}
                for r in range(args.rounds):
                    order = ("before", "after") if r % 2 == 0 else ("after", "before")
                    for side in order:
                        times[side].append(per_call_us(lambda side=side: fn(libs[side]), 2 * n * 4 * hid))
                before, after = statistics.median(times["before"]), statistics.median(times["after"])
                rows.append({"kernel": name, "rows": n, "cell": hid, "us_before": before, "us_after": after, "ratio": after / before})
                print(f"| {name} | {n} x {hid} | {before:.0f} | {after:.0f} | {after / before:.2f} |", flush=True)
    ratios = [float(row["ratio"]) for row in rows]  # type: ignore[arg-type]
    print(f"median ratio after / before over {len(ratios)} kernel-shapes: {statistics.median(ratios):.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        from spacy_elmo.kernels import cpu

        machine = {"cpu": cpu.cpuinfo().get("model name", "unknown"), "cores": os.cpu_count(), "load_average_at_end": os.getloadavg()[0]}
        result = {"command": " ".join(["python", *sys.argv]), "machine": machine, "threads": args.threads, "rounds": args.rounds}
        result.update({"torch": torch.__version__, "rows": rows})
        result["median_ratio"] = statistics.median(ratios)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
