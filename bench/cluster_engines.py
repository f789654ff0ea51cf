"""Which distributed engine for embed-corpus: Dask (dask.distributed) or Ray (Ray Data map_batches
over a pool of model-holding actors)? Measured the way the CI test and a small job use them.

For each engine, in a fresh process each time: the seconds to start a local cluster of 2 worker
processes, to run a small job (the same chunks of lines; each worker loads the biLM once and
writes its own shards), and to shut down; for Dask also the rate of 1,000 no-op tasks (the
scheduler's cost per chunk). Usage:

    python bench/cluster_engines.py --out bench/results/cluster_engines.json --repeats 3

Needs ``pip install "dask[distributed]" ray``; an engine that is not installed is reported as such.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_common import write_results

CHILD = r"""
import json, os, sys, tempfile, time
from pathlib import Path
engine, n_lines, chunk_lines = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.perf_counter()
from spacy_elmo.embedding.reader import Chunk
from spacy_elmo.embedding.worker import EmbedSpec, embed_chunk
words = "the a river bank money lends sat on of he she it ice melts in spring rises over its".split()
lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 12)) + " ." for i in range(n_lines)]
chunks = [Chunk(i, s, lines[s:s + chunk_lines]) for i, s in enumerate(range(0, n_lines, chunk_lines))]
spec = EmbedSpec("en_default")
out = Path(tempfile.mkdtemp())
t_import = time.perf_counter()
if engine == "dask":
    import distributed
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    client.wait_for_workers(2)
    t_start = time.perf_counter()
    futures = [client.submit(embed_chunk, spec, str(out), c, pure=False) for c in chunks]
    results = client.gather(futures)
    t_run = time.perf_counter()
    noop = client.gather([client.submit(int, i, pure=False) for i in range(1000)])  # the scheduler's cost per task
    t_close = time.perf_counter()
    noop_s = t_close - t_run
    client.close(); cluster.close()
elif engine == "ray":
    import ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    import ray.data
    class Embedder:
        def __call__(self, batch):
            rows = [embed_chunk(spec, str(out), Chunk(int(i), int(f), list(t))) for i, f, t in zip(batch["index"], batch["first"], batch["texts"])]
            return {"index": [r.index for r in rows], "tokens": [r.tokens for r in rows], "pid": [r.pid for r in rows]}
    ds = ray.data.from_items([{"index": c.index, "first": c.first_line, "texts": c.texts} for c in chunks])
    # the cluster is up once ray.init returns; actors start with the job
    t_start = time.perf_counter()
    results = ds.map_batches(Embedder, batch_size=1, concurrency=2, num_cpus=1).take_all()
    t_run = t_close = time.perf_counter()
    noop_s = 0.0
    ray.shutdown()
else:
    raise SystemExit(f"unknown engine {engine}")
t_end = time.perf_counter()
extra = {"noop_tasks_per_s": 1000 / noop_s} if engine == "dask" else {}
print(json.dumps({**extra, "import_s": t_import - t0, "start_s": t_start - t_import, "job_s": t_run - t_start,
                  "shutdown_s": t_end - t_close, "total_s": t_end - t0 - noop_s, "chunks": len(results),
                  "shards": len(list(out.glob("shard-*.npz")))}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--chunk-lines", type=int, default=25)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", RAY_DISABLE_USAGE_STATS="1", RAY_USAGE_STATS_ENABLED="0")
    runs = {"dask": [], "ray": []}
    load = []
    for _ in range(args.repeats):
        for engine in runs:  # interleaved, so that a change in the machine's load hits both
            load.append(os.getloadavg()[0])
            try:
                proc = subprocess.run([sys.executable, "-c", CHILD, engine, str(args.lines), str(args.chunk_lines)], env=env,
                                      capture_output=True, text=True, timeout=args.timeout, cwd=tempfile.gettempdir())
            except subprocess.TimeoutExpired:
                runs[engine].append({"error": f"timeout after {args.timeout:.0f} s"})
                continue
            if proc.returncode != 0:
                runs[engine].append({"error": (proc.stderr.strip().splitlines() or ["?"])[-1]})
            else:
                runs[engine].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(engine, runs[engine][-1], flush=True)
    summary = {}
    for engine, results in runs.items():
        ok = [r for r in results if "error" not in r]
        if ok:
            med = lambda key: sorted(r[key] for r in ok)[len(ok) // 2]  # noqa: E731
            summary[engine] = {key: round(med(key), 2) for key in ("start_s", "job_s", "shutdown_s", "total_s", "noop_tasks_per_s") if key in ok[0]}
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version(),
              "lines": args.lines, "chunk_lines": args.chunk_lines, "repeats": args.repeats,
              "load_average_at_start": [round(x, 2) for x in load], "median": summary, "runs": runs}
    try:
        import dask, ray  # noqa: E401

        report["versions"] = {"dask": dask.__version__, "ray": ray.__version__}
    except ImportError:
        pass
    print(json.dumps(summary, indent=1))
    if args.out:
        write_results(args.out, report)


if __name__ == "__main__":
    main()
