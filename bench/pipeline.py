#!/usr/bin/env python3
"""The whole pipeline: ``nlp.pipe`` with the ``elmo`` component against the raw biLM on the same
sentences and batches, and ``n_process=2`` against 1.

    python bench/pipeline.py                                  # UD EWT test, 1,000 sentences, both models, both precisions
    python bench/pipeline.py --text books --sentences 300 --repeats 1 --models en_default

For each model (``en_default``: the embedded default; ``original``: random weights of the
original shapes, ``python -m spacy_elmo random-weights elmo-original DIR --seed 1``, made once in
``--work-dir``) and precision (float32, bfloat16), every measurement runs in a fresh process
(so its peak RSS is its own), the configurations of one repeat one after the other, repeats
interleaved; the median run is reported and every run is kept in the JSON. Token cache off
everywhere (``token_cache_size = 0``), so the biLM itself is measured. At each ``--batch-sizes``
value B (the ``nlp.pipe`` batch):

* ``raw``: ``BiLM.iter_embeddings`` with the batching the component uses: windows of B
  sentences, each sorted by length and packed under ``max_batch_tokens`` (4096) per biLM batch;
  outputs dropped as they come;
* ``docs``: ``nlp.pipe`` over pre-tokenised Docs, one sentence per Doc (made before the clock starts);
* ``text``: ``nlp.pipe`` over plain text (the sentence's tokens joined by spaces) through spaCy's
  tokenizer and sentencizer, then the component; tokens/s counts spaCy's tokens;
* overhead = raw tokens/s / component tokens/s - 1, from the medians, and the median of each
  repeat's pair (the two ran one after the other: steadier on a busy machine); the same from CPU
  seconds (user + system of the process), which a neighbour's load disturbs less.

Then ``nlp.pipe(texts, n_process=2)`` against ``n_process=1`` (batch ``--mp-batch-size``, so that
both workers get batches): tokens/s, peak RSS summed over the processes (each process's own peak,
``VmHWM``; forked workers share the parent's pages, so the sum overstates what is resident) and
the largest resident total seen (PSS summed over the processes, sampled every 0.5 s; the
sampling runs in both the 1- and the 2-process runs).

The raw biLM's process sets torch to ``--threads``; the pipeline's processes leave torch's own
setting alone (all cores) and give the component ``threads = --threads``, as a user's pipeline
does: the component's setting has to govern all of its work. Reads the project's data
(``spacy project assets project/`` then ``spacy project run data project/``) or
``--sentences-file`` (one space-tokenised sentence per line). Writes
``bench/results/pipeline-TEXT.json`` and ``.md`` (``--out``).
"""
from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any, Dict, Iterator, List

from bench_common import (
    RESULTS,
    WORK,
    Clock,
    ProcessMemory,
    command,
    elmo_nlp,
    interleaved,
    machine,
    median_run,
    peak_rss_mb,
    sentence_doc,
    serve_worker,
    text_sentences,
    write_results,
)
from bench_common import run_worker as run_script_worker

MODELS = {"en_default": "the embedded default model", "original": "random weights of the original shapes (seed 1)"}
MAX_BATCH_TOKENS = 4096  # the component's default budget, given to the raw biLM too


# ------------------------------------------------------------------------------------------ worker


def worker(task: Dict[str, Any]) -> Dict[str, Any]:
    """One measurement in this (fresh) process."""
    import torch

    kind, batch, threads = task["kind"], task["batch_size"], task["threads"]
    sentences = text_sentences(task["sentences"], task["limit"])
    warm = sentences[: min(batch, 64)]
    if kind == "raw":
        from spacy_elmo import load_bilm

        torch.set_num_threads(threads)
        bilm = load_bilm(task["weights"])
        bilm.set_token_cache(0)
        bilm.set_inference_precision(task["precision"])

        def run(items: List[List[str]]) -> int:
            for _ in bilm.iter_embeddings(items, batch_size=batch, max_batch_tokens=MAX_BATCH_TOKENS, window=batch):
                pass
            return sum(map(len, items))

        run(warm)
        with Clock() as clock:
            tokens = run(sentences)
        return _result(tokens, clock)

    nlp = elmo_nlp(kind != "docs", weights=task["weights"], token_cache_size=0, precision=task["precision"], threads=threads,
                   max_batch_tokens=MAX_BATCH_TOKENS)
    nlp.get_pipe("elmo").initialize()

    def docs(items: List[List[str]]) -> Iterator[Any]:
        return (sentence_doc(nlp.vocab, words) for words in items)

    def count(stream: Iterator[Any]) -> int:
        return sum(len(doc) for doc in stream)  # the Docs are dropped as they come

    n_process = task.get("n_process", 0)
    if kind == "docs":
        count(nlp.pipe(docs(warm), batch_size=batch))
        made = list(docs(sentences))  # made before the clock starts: this times the pipeline, not Doc()
        with Clock() as clock:
            tokens = count(nlp.pipe(made, batch_size=batch))
        return _result(tokens, clock)
    texts = [" ".join(words) for words in sentences]
    count(nlp.pipe(texts[: len(warm)], batch_size=batch))
    if n_process == 0:  # the text path timed alone (no sampling thread beside it)
        with Clock() as clock:
            tokens = count(nlp.pipe(texts, batch_size=batch))
        return _result(tokens, clock)
    with ProcessMemory() as memory, Clock(children=True) as clock:  # CPU seconds: this process and its finished workers
        tokens = count(nlp.pipe(texts, batch_size=batch, n_process=n_process))
    result = _result(tokens, clock)
    result.update(processes=len(memory.peaks_kb), peak_rss_sum_mb=sum(memory.peaks_kb.values()) / 1024,
                  max_pss_total_mb=memory.max_pss_kb / 1024)
    return result


def _result(tokens: int, clock: Clock) -> Dict[str, Any]:
    seconds, cpu = clock.seconds, clock.cpu_seconds
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "cpu_seconds": cpu,
            "tokens_per_cpu_s": tokens / cpu if cpu else None, "peak_rss_mb": peak_rss_mb()}


# ------------------------------------------------------------------------------------------ driver


def run_worker(task: Dict[str, Any]) -> Dict[str, Any]:
    env = dict(os.environ)
    if task["kind"] == "raw":
        env["OMP_NUM_THREADS"] = str(task["threads"])
    else:  # the pipeline keeps torch's own thread count: the component's setting must govern its work
        env.pop("OMP_NUM_THREADS", None)
    return run_script_worker(__file__, task, env)


def overheads(raw: List[Dict[str, Any]], pipe: List[Dict[str, Any]]) -> Dict[str, float]:
    """Component vs raw biLM: from the medians, and the median of the pairs (repeat by repeat), wall and CPU."""

    def ratio(key: str, a: Dict[str, Any], b: Dict[str, Any]) -> float:
        return a[key] / b[key] - 1

    return {
        "wall_of_medians": ratio("tokens_per_s", median_run(raw), median_run(pipe)),
        "wall_median_of_pairs": statistics.median(ratio("tokens_per_s", a, b) for a, b in zip(raw, pipe)),
        "cpu_median_of_pairs": statistics.median(ratio("tokens_per_cpu_s", a, b) for a, b in zip(raw, pipe)),
    }


def main() -> None:
    serve_worker(worker)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", default="ud", choices=["ud", "books"], help="UD EWT test sentences or the Gutenberg test books")
    ap.add_argument("--sentences-file", type=Path, help="one space-tokenised sentence per line (instead of --text)")
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--models", default="en_default,original", help=f"comma-separated: {', '.join(MODELS)}")
    ap.add_argument("--precisions", default="float32,bfloat16")
    ap.add_argument("--batch-sizes", default="64,1000", help="nlp.pipe batch sizes (1000 = spaCy's default)")
    ap.add_argument("--mp-batch-size", type=int, default=64, help="nlp.pipe batch for n_process=2 against 1 (0: skip)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work-dir", type=Path, default=WORK)
    ap.add_argument("--out", type=Path, help="JSON path (default bench/results/pipeline-TEXT.json); the table goes beside it as .md")
    args = ap.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"--models: unknown {unknown}; use {', '.join(MODELS)}")
    from bench import make_inputs  # random weights of the original shapes, and bench/bench.py's sentences (at most 100 tokens)

    paths = make_inputs(args.work_dir, [m for m in models if m != "en_default"], args.sentences, None if args.sentences_file else args.text)
    sentences = args.sentences_file or paths["sentences"]
    weights = {"en_default": "en_default", **({"original": str(paths["original"])} if "original" in models else {})}
    lines = text_sentences(str(sentences), args.sentences)
    source = str(args.sentences_file) if args.sentences_file else args.text
    results: Dict[str, Any] = {
        "command": command("pipeline.py"),
        "machine": machine(args.threads, spacy=__import__("spacy").__version__),
        "text": {"source": source, "sentences": len(lines), "tokens": sum(map(len, lines)), "types": len({w for s in lines for w in s})},
        "repeats": args.repeats, "max_batch_tokens": MAX_BATCH_TOKENS, "configs": {},
    }
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    for model in models:
        for precision in args.precisions.split(","):
            base = {"weights": weights[model], "precision": precision, "sentences": str(sentences), "limit": args.sentences, "threads": args.threads}
            tasks: Dict[str, Dict[str, Any]] = {}
            for b in batch_sizes:
                for kind in ("raw", "docs", "text"):
                    tasks[f"{kind}_b{b}"] = {**base, "kind": kind, "batch_size": b}
            if args.mp_batch_size:
                for n in (1, 2):
                    tasks[f"text_b{args.mp_batch_size}_np{n}"] = {**base, "kind": "text", "batch_size": args.mp_batch_size, "n_process": n}
            runs = interleaved({key: lambda task=task: run_worker(task) for key, task in tasks.items()}, args.repeats, f"{model} {precision} ")
            r: Dict[str, Any] = {key: median_run(measured) for key, measured in runs.items()}
            r["all_runs"] = runs
            for b in batch_sizes:
                for kind in ("docs", "text"):
                    r[f"overhead_{kind}_b{b}"] = overheads(runs[f"raw_b{b}"], runs[f"{kind}_b{b}"])
            results["configs"][f"{model}/{precision}"] = r
    results["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    out = args.out or RESULTS / f"pipeline-{Path(source).stem if args.sentences_file else args.text}.json"
    write_results(out, results, markdown(results, batch_sizes, args.mp_batch_size))


def _median(r: Dict[str, Any], key: str) -> float:
    """The median tokens per CPU second of a configuration's runs."""
    return statistics.median(run["tokens_per_cpu_s"] for run in r["all_runs"][key])


def markdown(results: Dict[str, Any], batch_sizes: List[int], mp_batch: int) -> str:
    m, t = results["machine"], results["text"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['threads']} thread(s), torch {m['torch']}, spaCy {m['spacy']}; "
        f"load average {m['load_average'][0]:.1f} at the start, {m['load_average_end'][0]:.1f} at the end.",
        f"Text: {t['source']}, {t['sentences']:,} sentences, {t['tokens']:,} tokens, {t['types']:,} word types. "
        f"Token cache off; max_batch_tokens {results['max_batch_tokens']}; median of {results['repeats']} interleaved runs, each in a fresh process.",
        f"Command: `{results['command']}`",
        "",
        "| model | precision | nlp.pipe batch | raw biLM tokens/s | component, Docs: tokens/s | component, text + sentencizer: tokens/s "
        "| overhead, wall (Docs / text) | overhead, CPU time (Docs / text) | tokens per CPU second (raw / Docs / text) | peak RSS MB (raw / Docs / text) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in results["configs"].items():
        model, precision = name.split("/")
        for b in batch_sizes:
            raw, docs, text = r[f"raw_b{b}"], r[f"docs_b{b}"], r[f"text_b{b}"]
            od, ot = r[f"overhead_docs_b{b}"], r[f"overhead_text_b{b}"]
            lines.append(
                f"| {model} | {precision} | {b} | {raw['tokens_per_s']:,.0f} | {docs['tokens_per_s']:,.0f} | {text['tokens_per_s']:,.0f} "
                f"| {100 * od['wall_median_of_pairs']:+.1f}% / {100 * ot['wall_median_of_pairs']:+.1f}% "
                f"| {100 * od['cpu_median_of_pairs']:+.1f}% / {100 * ot['cpu_median_of_pairs']:+.1f}% "
                f"| {_median(r, f'raw_b{b}'):,.0f} / {_median(r, f'docs_b{b}'):,.0f} / {_median(r, f'text_b{b}'):,.0f} "
                f"| {raw['peak_rss_mb']:,.0f} / {docs['peak_rss_mb']:,.0f} / {text['peak_rss_mb']:,.0f} |"
            )
    if mp_batch:
        lines += [
            "",
            f"`nlp.pipe(texts, batch_size={mp_batch}, n_process=N)` (tokenizer, sentencizer, elmo):",
            "",
            "| model | precision | tokens/s, n_process 1 -> 2 | speed-up | tokens per CPU second, all processes (1 -> 2) "
            "| peak RSS summed over processes, MB (1 -> 2) | largest PSS total, MB (1 -> 2) |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, r in results["configs"].items():
            model, precision = name.split("/")
            one, two = r[f"text_b{mp_batch}_np1"], r[f"text_b{mp_batch}_np2"]
            lines.append(
                f"| {model} | {precision} | {one['tokens_per_s']:,.0f} -> {two['tokens_per_s']:,.0f} | {two['tokens_per_s'] / one['tokens_per_s']:.2f}x "
                f"| {_median(r, f'text_b{mp_batch}_np1'):,.0f} -> {_median(r, f'text_b{mp_batch}_np2'):,.0f} "
                f"| {one['peak_rss_sum_mb']:,.0f} -> {two['peak_rss_sum_mb']:,.0f} ({two['processes']} processes) "
                f"| {one['max_pss_total_mb']:,.0f} -> {two['max_pss_total_mb']:,.0f} |"
            )
    lines += ["", "Overhead = raw tokens/s / component tokens/s - 1, the median over the repeats' pairs (each pair ran back to back); "
              "the CPU columns take tokens per CPU second (user + system, the process and its finished workers) instead of per second: "
              "on a shared machine they move far less than wall time. All runs are in the JSON."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
