#!/usr/bin/env python3
"""One thread or two? ``nlp.pipe`` speed of the `elmo` component by thread count and process count.

Real text: the sentences of the UD English EWT test set (``project/assets/data/ud_english_ewt``, the
``# text =`` lines), the embedded default English model, the component's default settings. Every
configuration runs in a fresh process (so each sets its own torch thread count before anything
runs), after a warm-up; configurations are interleaved over ``--repeats`` rounds because the
speed of a shared machine drifts, and each run records the 1-minute load average before it starts.
Writes every run to ``bench/results/threads.json`` (``threads-raw.json`` with ``--raw``) and the
markdown table (median tokens/s per configuration, and the ratio to one thread in one process)
beside it.

    python bench/threads.py                 # about 5 minutes on 2 cores
    python bench/threads.py --sentences 400 --repeats 1   # a quick look
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from typing import Dict, List

from bench_common import RESULTS, Clock, machine, ud_path, write_results


def ewt_texts(limit: int) -> List[str]:
    from spacy_elmo.assets import open_text

    with open_text(ud_path("test")) as fh:
        texts = [line[len("# text = ") :].strip() for line in fh if line.startswith("# text = ")]
    return texts[:limit] if limit else texts


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)  # before anything runs; nlp.pipe's workers set it again (below)
    import spacy

    from spacy.language import Language

    from spacy_elmo.threads import set_threads

    @Language.component("bench_threads")
    def bench_threads(doc):  # what the component's `threads` setting does: set the count in every process
        if args.raw:
            torch.set_num_threads(args.threads)  # no fork guard: reproduces the hang in forked workers
        else:
            set_threads(args.threads)  # one thread in nlp.pipe's forked workers, with a warning
        return doc

    texts = ewt_texts(args.sentences)
    nlp = spacy.blank("en")
    nlp.add_pipe("bench_threads")
    nlp.add_pipe("elmo")
    for _ in nlp.pipe(texts[:50]):  # warm-up: loads the model, fills nothing that matters
        pass
    with Clock() as clock:
        tokens = sum(len(doc) for doc in nlp.pipe(texts, n_process=args.n_process, batch_size=args.batch_size))
    print(json.dumps({"threads": args.threads, "n_process": args.n_process, "tokens": tokens,
                      "sentences": len(texts), "seconds": clock.seconds, "tokens_per_s": tokens / clock.seconds}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=1000, help="first N test sentences (0 = all 2,077)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds over all configurations, interleaved")
    ap.add_argument("--batch-size", type=int, default=100, help="nlp.pipe batch size (Docs)")
    ap.add_argument("--configs", default="1x1,2x1,1x2,2x2", help="THREADSxPROCESSES, comma-separated")
    ap.add_argument("--timeout", type=float, default=900, help="seconds before a run is abandoned")
    ap.add_argument("--raw", action="store_true", help="set torch's thread count directly in the workers too "
                    "(no fork guard: with 2 threads the forked workers hang; use with --timeout)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--n-process", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    configs = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
    runs: List[Dict] = []
    for round_ in range(args.repeats):
        for threads, n_process in configs:
            load = os.getloadavg()[0]
            cmd = [sys.executable, __file__, "--worker", "--threads", str(threads), "--n-process", str(n_process),
                   "--sentences", str(args.sentences), "--batch-size", str(args.batch_size)] + (["--raw"] if args.raw else [])
            env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
            # own process group: a hung run's forked nlp.pipe workers are killed with it
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
            try:
                out, err = proc.communicate(timeout=args.timeout)
                if proc.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
                run = json.loads(out.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                run = {"threads": threads, "n_process": n_process, "timed_out": args.timeout, "tokens_per_s": 0.0}
            run.update(round=round_, load_before=load)
            runs.append(run)
            print(json.dumps(run), file=sys.stderr, flush=True)
    info = machine(None, cores_usable=len(os.sched_getaffinity(0)))
    base = statistics.median(r["tokens_per_s"] for r in runs if (r["threads"], r["n_process"]) == configs[0]) or 1.0
    lines = [f"{info['cpu']}, {info['cores_usable']} cores, torch {info['torch']}, {runs[0].get('sentences', args.sentences)} EWT test sentences, "
             f"median of {args.repeats} runs; load average before the runs {min(r['load_before'] for r in runs):.1f}-"
             f"{max(r['load_before'] for r in runs):.1f}", "",
             "| threads x processes | nlp.pipe tokens/s (median) | all runs | vs 1 x 1 |", "| --- | ---: | --- | ---: |"]
    for threads, n_process in configs:
        mine = [r for r in runs if (r["threads"], r["n_process"]) == (threads, n_process)]
        if any("timed_out" in r for r in mine):
            lines.append(f"| {threads} x {n_process} | - | no result within {args.timeout:.0f} s in {sum('timed_out' in r for r in mine)} of {len(mine)} runs (hung) | - |")
            continue
        speeds = [r["tokens_per_s"] for r in mine]
        median = statistics.median(speeds)
        lines.append(f"| {threads} x {n_process} | {median:.0f} | {' / '.join(f'{s:.0f}' for s in speeds)} | {median / base:.2f}x |")
    write_results(RESULTS / ("threads-raw.json" if args.raw else "threads.json"), {"machine": info, "args": vars(args), "runs": runs}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
