"""Peak memory and time of load_lm_head on a head of the published shape (793,471 x 512).

Writes a random head of the authors' layout (softmax/W, softmax/b float32 + a vocabulary; 1.6 GB)
into a folder, then loads it in a fresh process per setting and reports the peak resident memory
(ru_maxrss) and the seconds. Usage: ``python bench/lm_head_memory.py FOLDER [--out results.json]``.

``--substitutes``: instead, the memory that ``LMHead.top_substitutes`` adds on a random head of
that shape held in memory (1,024 states, top 10, with a prior and excluded words), in 1,024-row
chunks (the old fixed chunk) and by its default memory budget (1 GiB of scores); no FOLDER
needed. Linux only: the peak is the kernel's VmHWM, reset (``/proc/self/clear_refs``) just before
the call, less the resident memory then.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_common import machine, run_child, write_results

ROWS, DIM = 793_471, 512
SETTINGS = {
    "float32": "dict()",
    "bfloat16": "dict(dtype=torch.bfloat16)",
    "top 100k, float32": "dict(top_n=100_000)",
    "top 100k, bfloat16": "dict(top_n=100_000, dtype=torch.bfloat16)",
    "mmap (float32, untouched)": "dict(mmap=True)",
}
CHILD = """
import json, sys, torch
from pathlib import Path
from bench_common import peak_rss_mb, timed
from spacy_elmo.hub.lm_head import read_hdf5_head
base, folder = peak_rss_mb(), Path(sys.argv[1])
head, seconds = timed(read_hdf5_head, folder / "softmax.hdf5", folder / "vocab.txt", dim=512, **{value})
peak = peak_rss_mb()
print(json.dumps({"words": len(head.vocab), "dtype": str(head.weight.dtype), "seconds": round(seconds, 2), "grew_mb": round(peak - base), "peak_mb": round(peak)}))
"""

SUBSTITUTES = {"1,024-row chunks (before)": "1024", "default budget (1 GiB of scores)": "None"}
SUBSTITUTES_CHILD = """
import json, os, torch
from bench_common import proc_kb, timed
from spacy_elmo.induction.substitutes import LMHead, score_rows
torch.manual_seed(0)
rows, dim = ROWS_DIM
head = LMHead([f"w{i}" for i in range(rows)], torch.randn(rows, dim) / dim**0.5, torch.randn(rows))
states, prior = torch.randn(1024, dim), torch.log_softmax(torch.randn(rows), -1)
exclude = torch.zeros(rows, dtype=torch.bool)
exclude[:3] = True
with open("/proc/self/clear_refs", "w") as handle:  # reset the peak (VmHWM) to what is resident now
    handle.write("5")
base = proc_kb(os.getpid(), "VmRSS")  # kB, from the kernel's accounting of this process
_, seconds = timed(head.top_substitutes, states, 10, exclude, prior, 0.75, chunk={value})
peak = proc_kb(os.getpid(), "VmHWM")
chunk = {value} or score_rows(rows)
print(json.dumps({"chunk_rows": chunk, "states": 1024, "seconds": round(seconds, 2), "grew_mb": round((peak - base) / 1024), "peak_mb": round(peak / 1024)}))
""".replace("ROWS_DIM", f"{ROWS}, {DIM}")


def measure(settings: dict, code: str, *args: object) -> list:
    """Each setting in a fresh process of one thread: its row."""
    rows = []
    for name, value in settings.items():
        rows.append({"setting": name, **run_child(code.replace("{value}", value), *args)})
        print(json.dumps(rows[-1]))
    return rows


def write_head(folder: Path) -> None:
    import h5py
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "softmax.hdf5").is_file():
        return
    rng = np.random.default_rng(0)
    with h5py.File(folder / "softmax.hdf5", "w") as handle:
        weight = handle.create_dataset("softmax/W", (ROWS, DIM), dtype="float32")
        for start in range(0, ROWS, 1 << 16):
            stop = min(ROWS, start + (1 << 16))
            weight[start:stop] = rng.normal(size=(stop - start, DIM)).astype(np.float32)
        handle.create_dataset("softmax/b", data=rng.normal(size=ROWS).astype(np.float32))
    (folder / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(ROWS)), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--substitutes", action="store_true", help="measure top_substitutes instead of loading")
    args = parser.parse_args()
    if args.folder is None and not args.substitutes:
        parser.error("FOLDER is needed (where the random head is written), unless --substitutes")
    if args.substitutes:
        rows = measure(SUBSTITUTES, SUBSTITUTES_CHILD)
    else:
        write_head(args.folder)
        rows = measure(SETTINGS, CHILD, args.folder)
    if args.out:
        write_results(args.out, {"shape": [ROWS, DIM], "machine": machine(1), "rows": rows})


if __name__ == "__main__":
    main()
