"""embed-corpus throughput: one process, 2 local processes, and a local Dask cluster of 1 and 2 workers.

The input is real text: lines of the Gutenberg books in project/assets/data/gutenberg_en_books (in
manifest order, blank lines dropped), tokenized by spaCy's English tokenizer and written one line
per line, whitespace-separated, until --tokens tokens. Every configuration runs in a fresh
process (the CLI's code path, --format shards, all layers, the default model, 1 thread per
worker); configurations are interleaved over --repeats rounds so that changes in the machine's
load hit all of them. Reported per run: wall time of the whole job (start-up, model loads,
embedding, manifest), the embedding rate (tokens / time of the chunk loop) and the per-worker
steady rate (tokens / busy seconds over each worker's chunks after its first, which carries the
model load). ``dask_default_env:1`` is ``dask:1`` with Dask's default worker environment
(``MALLOC_TRIM_THRESHOLD_=65536``, which spacy-elmo's local clusters leave out and its tasks
compensate for: ``cluster.tune_allocator``), ``dask_default_env_untuned:1`` the same without that
compensation, as on a plain Dask cluster. The HDF5 assembly from the shards is timed once, as the serial step of a cluster run.

    python bench/embed_corpus.py --out bench/results/embed_corpus.json
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from bench_common import DATA, REPO, book_files, interleaved, machine, median, run_child, timed, write_results

from spacy_elmo.assets import open_text

BOOKS = DATA / "gutenberg_en_books"  # the project's assets

CHILD = r"""
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from spacy_elmo.embedding import EmbedOptions, embed_corpus, cluster
source, out, chunk_lines, mode = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
kind, count = mode.split(":")
if kind.startswith("dask_default_env"):  # Dask's own worker environment (MALLOC_TRIM_THRESHOLD_=65536), for comparison
    import dask, distributed  # noqa: E401  (distributed adds its settings to dask's config)
    default = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
    if kind.endswith("_untuned"):  # and without spacy-elmo's allocator tuning on the workers
        default[cluster.NO_TUNING_ENV] = "1"
    cluster.worker_environment = lambda threads=1: default
    kind = "dask"
options = EmbedOptions(input=source, output=out, format="shards", chunk_lines=chunk_lines, overwrite=True,
                       n_process=int(count) if kind == "process" else 1, cluster=f"local:{count}" if kind == "dask" else None)
summary = embed_corpus(options)
wall = time.perf_counter() - t0
seen = set()
per_worker = {}
for r in summary.results:  # in completion order: a worker's first chunk carries its model load
    if r.pid not in seen:
        seen.add(r.pid)
        continue
    b, t = per_worker.get(r.pid, (0.0, 0))
    per_worker[r.pid] = (b + r.seconds, t + r.tokens)
steady = sum(t for b, t in per_worker.values()) / sum(b for b, t in per_worker.values()) if per_worker else None
print(json.dumps({"mode": mode, "wall_s": wall, "embed_s": summary.seconds, "tokens": summary.tokens, "lines": summary.lines,
                  "chunks": summary.chunks, "workers": summary.workers, "embed_tok_s": summary.tokens_per_second,
                  "wall_tok_s": summary.tokens / wall, "steady_tok_s_per_worker": steady,
                  "chunk_seconds": [round(r.seconds, 3) for r in summary.results]}))
"""


def make_input(path: Path, n_tokens: int) -> dict:
    import spacy

    tokenizer = spacy.blank("en").tokenizer
    total = lines = 0
    used = []
    with open(path, "w", encoding="utf-8") as out:
        for book in book_files(BOOKS):
            used.append(book.name)
            with open_text(book) as handle:
                for raw in handle:
                    words = [t.text for t in tokenizer(raw.strip()) if not t.is_space]
                    if not words:
                        continue
                    out.write(" ".join(words) + "\n")
                    total += len(words)
                    lines += 1
                    if total >= n_tokens:
                        return {"books": used, "lines": lines, "tokens": total}
    return {"books": used, "lines": lines, "tokens": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=60_000)
    parser.add_argument("--chunk-lines", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="here:1,process:2,dask:1,dask:2,dask_default_env:1,dask_default_env_untuned:1")
    parser.add_argument("--conditions", default="", help="How busy the machine was, for the record")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="embed-corpus-bench-"))
    env = {"MKL_NUM_THREADS": "1", "SPACY_ELMO_PROGRESS_EVERY": "100000"}
    try:
        source = work / "corpus.txt"
        corpus = make_input(source, args.tokens)
        print("input:", corpus, flush=True)
        by_mode = interleaved({m: lambda m=m: run_child(CHILD, source, work / "out", args.chunk_lines, m, env=env, cwd=REPO) for m in args.modes.split(",")},
                              args.repeats, show="embed_tok_s")
        # the serial step of a cluster run: the HDF5 file from the shards of the last run
        from spacy_elmo.embedding import hdf5, shards

        manifest = shards.read_manifest(work / "out")
        _, assemble_s = timed(hdf5.assemble, [work / "out" / e["file"] for e in manifest["shards"]], work / "out.hdf5")
        shard_bytes = sum((work / "out" / e["file"]).stat().st_size for e in manifest["shards"])
        medians = {mode: {key: round(median([r[key] for r in mine if r[key] is not None]), 1)
                          for key in ("wall_s", "embed_tok_s", "wall_tok_s", "steady_tok_s_per_worker") if any(r[key] is not None for r in mine)}
                   for mode, mine in by_mode.items()}
        report = {
            "machine": machine(1), "conditions": args.conditions, "threads_per_worker": 1,
            "input": corpus, "chunk_lines": args.chunk_lines, "format": "shards", "layers": "all",
            "shard_bytes": shard_bytes, "shard_bytes_per_token": round(shard_bytes / manifest["tokens"], 1),
            "hdf5_assemble_s": round(assemble_s, 2), "hdf5_assemble_tok_s": round(manifest["tokens"] / assemble_s),
            "hdf5_bytes": (work / "out.hdf5").stat().st_size, "median": medians, "runs": [r for mine in by_mode.values() for r in mine],
        }
        print(json.dumps({k: report[k] for k in ("median", "hdf5_assemble_s", "shard_bytes_per_token")}, indent=1))
        if args.out:
            write_results(args.out, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
