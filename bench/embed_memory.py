"""embed-corpus resident memory over a long corpus: its trend while embedding, and what assembly adds.

Writes --lines distinct two-token lines ("line12345 ."), then runs
``embed_corpus`` (HDF5 output, all layers, 1 thread, one process, the repository's tiny
AllenNLP test biLM so that a million lines take minutes) in a child process and samples the
child's memory every --every seconds: private resident (resident minus shared/file-backed
pages, from /proc/PID/statm) and total resident (VmRSS). Progress is the share of chunks whose
shard exists; the phase is "embed" until every shard is written, then "assemble" (the HDF5 file
is written from the shards).

Each line has a distinct token, so the character-id cache (200,000 tokens) fills during the first
20 % of the default million lines. Reported: per phase the peak; for the embedding phase after
--warm of the chunks (default 25 %: after the cache is full), the least
squares slope in MB per 100,000 lines and the medians of its first and last thirds; the sizes of
the output and of its sentence_to_index JSON. ``--pythonpath`` measures another checkout of the
package (e.g. an older commit) with the same driver.

    python bench/embed_memory.py --lines 1000000 --out bench/results/embed_memory.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "data" / "elmo-fixture" / "allennlp"

CHILD = r"""
import sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
from spacy_elmo.embedding import EmbedOptions, embed_corpus
source, out, weights, chunk_lines = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
t0 = time.perf_counter()
summary = embed_corpus(EmbedOptions(input=source, output=out, weights=weights, chunk_lines=chunk_lines, threads=1))
print(summary.lines, summary.tokens, time.perf_counter() - t0, flush=True)
"""


def memory_mb(pid: int) -> Dict[str, float]:
    """Private and total resident memory of a process, in MB (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            fields = [int(x) for x in fh.read().split()]
    except OSError:
        return {"private": 0.0, "resident": 0.0}
    page = os.sysconf("SC_PAGE_SIZE") / 2**20
    return {"private": (fields[1] - fields[2]) * page, "resident": fields[1] * page}


def slope_per_100k(rows: List[Dict[str, Any]], key: str, lines: int) -> float:
    xs = [r["progress"] * lines / 1e5 for r in rows]
    ys = [r[key] for r in rows]
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def median(values: List[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--chunk-lines", type=int, default=1000)
    ap.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    ap.add_argument("--warm", type=float, default=0.25,
                    help="share of the chunks left out of the trend: the model load, and the character-id cache filling "
                         "(200,000 distinct tokens: the first 20 %% of the default corpus)")
    ap.add_argument("--weights", default=str(FIXTURE))
    ap.add_argument("--pythonpath", default=str(REPO), help="the checkout of spacy_elmo to measure")
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a new temporary one, removed afterwards)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="embed-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    source, output = work / "corpus.txt", work / "out.hdf5"
    for stale in (output, work / "out.hdf5.parts"):
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    with open(source, "w", encoding="utf-8") as fh:
        for i in range(args.lines):
            fh.write(f"line{i} .\n")
    n_chunks = -(-args.lines // args.chunk_lines)
    parts = work / "out.hdf5.parts"
    env = dict(os.environ, PYTHONPATH=args.pythonpath, OMP_NUM_THREADS="1")
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(source), str(output), args.weights, str(args.chunk_lines)],
                             env=env, stdout=subprocess.PIPE, text=True, cwd=args.pythonpath)  # cwd: `-c` puts it first on sys.path
    samples: List[Dict[str, Any]] = []
    done = 0
    while child.poll() is None:
        if parts.is_dir():
            try:
                done = sum(1 for p in parts.iterdir() if p.name.startswith("shard-"))
            except OSError:
                pass
        phase = "assemble" if done >= n_chunks or (samples and samples[-1]["phase"] == "assemble") else "embed"
        if phase == "assemble":  # the shard folder is removed at the end: progress stays complete
            done = n_chunks
        samples.append({"t": round(time.perf_counter() - start, 2), "progress": done / n_chunks, "phase": phase, **memory_mb(child.pid)})
        time.sleep(args.every)
    stdout = child.stdout.read() if child.stdout else ""
    if child.returncode != 0:
        raise SystemExit(f"embed_corpus failed (exit {child.returncode})")
    lines, tokens, seconds = stdout.split()
    samples = [s for s in samples if s["resident"] > 0]
    embed = [s for s in samples if s["phase"] == "embed"]
    trend = [s for s in embed if s["progress"] >= args.warm]
    third = max(1, len(trend) // 3)
    result: Dict[str, Any] = {
        "bench": "embed_memory",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared with other jobs (busy)",
        "python": platform.python_version(),
        "checkout": "this repository" if Path(args.pythonpath).resolve() == REPO else "another checkout (--pythonpath)",
        "lines": int(lines),
        "tokens": int(tokens),
        "chunk_lines": args.chunk_lines,
        "seconds": float(seconds),
        "output_bytes": output.stat().st_size,
        "samples": len(samples),
    }
    try:
        import h5py

        with h5py.File(output, "r") as f:
            result["sentence_to_index_bytes"] = len(f["sentence_to_index"][0])
    except ImportError:  # pragma: no cover
        pass
    for key in ("private", "resident"):
        result[key] = {
            "embed_peak_mb": round(max((s[key] for s in embed), default=0.0), 1),
            "embed_first_third_median_mb": round(median([s[key] for s in trend[:third]]), 1),
            "embed_last_third_median_mb": round(median([s[key] for s in trend[-third:]]), 1),
            "embed_slope_mb_per_100k_lines": round(slope_per_100k(trend, key, int(lines)), 3),
            "assemble_peak_mb": round(max((s[key] for s in samples if s["phase"] == "assemble"), default=0.0), 1),
        }
    result["trace"] = [{k: (round(v, 1) if isinstance(v, float) else v) for k, v in s.items()} for s in samples[:: max(1, len(samples) // 400)]]
    trace = result.pop("trace")
    text = json.dumps(result, indent=1)[:-2] + ',\n "trace": [\n' + ",\n".join("  " + json.dumps(row) for row in trace) + "\n ]\n}"
    result["trace"] = trace
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "trace"}, indent=1))
    if args.work is None:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
