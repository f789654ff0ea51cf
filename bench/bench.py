#!/usr/bin/env python3
"""spacy-elmo benchmark: tokens/s, latency and peak RSS of the raw biLM and of ``nlp.pipe``,
beside AllenNLP's own ELMo on the same machine, sentences and random weights.

One command reproduces every figure of the benchmark tables (README, docs/benchmarks.md):

    python bench/bench.py --ref-python REF_VENV/bin/python                 # real text
    python bench/bench.py --text synthetic --ref-python REF_VENV/bin/python  # the synthetic set

``--text books`` (the default) takes whole sentences, in reading order, from the Gutenberg test
books of the spaCy project's assets (project/assets/data; split by spaCy's sentencizer); ``--text ud`` the UD English EWT test
sentences (gold tokens); ``--text synthetic`` the generated English-like sentences (615 word
types: a token cache warms up on them far faster than on real text). Every cached figure
carries its cache hit rate. (``--ref-python`` is optional: the reference virtualenv's recipe is in
docs/benchmarks.md.) ``--text books`` and ``--text ud`` read the downloaded assets
(``spacy project assets project/`` then ``spacy project run data project/``); ``--text synthetic``
needs nothing beyond the clone. It writes bench/results/bench.json and bench/results/bench.md.

What is measured, each configuration in a fresh process (so peak RSS is its own):
* the machine's fp32 matmul rate (2048^3, the chosen thread count) and, from each model's
  multiply-adds per token, the compute roof in tokens/s and the fraction of it reached;
* raw biLM ``embed_sentences`` at batch sizes 1, 8 and 64 (token cache off), and at 64 with the
  token-encoder cache warm;
* ``nlp.pipe`` with the ``elmo`` component at the same batch sizes (one sentence per Doc);
* p50 latency of one 10-token sentence;
* RSS over a long ``nlp.pipe`` stream (growth after warm-up);
* training throughput of the LM objective on the small shapes (forward + backward ~ 3x the
  inference FLOPs of the biLM, plus the softmax);
* AllenNLP 2.10.1 (``bench/reference.py allennlp --bench``) at batch 64 and batch 1.

``--headline`` measures the speed headline instead (``bench/results/allennlp-speed.{json,md}``):

    python bench/bench.py --headline --ref-python REF_VENV/bin/python --text ud --sentences 500 --threads 1,2 --repeats 3

For each thread count, ``--repeats`` rounds, each running every configuration once in a fresh
process, in turn (each figure is the median round): batches of 64 sentences in input order (each
sorted by length inside, as ``nlp.pipe`` batches), random weights of the original shapes, token
cache off. ``allennlp`` (``allennlp_b256``: batches of 256, what a bigger batch buys it);
``float32`` / ``bfloat16``: ``BiLM.iter_embeddings`` in each precision; ``component_bfloat16``:
``nlp.pipe`` with the ``elmo`` component (``precision = "bfloat16"``, ``token_cache_size = 0``),
pre-tokenised Docs, 64 a batch (``component_bfloat16_defaults``: ``nlp.pipe``'s default batch of
1,000 Docs, the component's ``max_batch_tokens = 4096`` choosing the biLM's batches). Also the
matrix-product rates (float32 2048^3, float32 and bfloat16 at the recurrent step's shape) and the
compute roof: tokens/s if every nominal multiply-add ran at the float32 rate. ``--int8`` adds
``int8`` (``BiLM.iter_embeddings`` with the int8 products) and ``component_int8`` /
``component_int8_defaults`` (the component with ``precision = "int8"``, batches as above).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional

import reference  # bench/reference.py: AllenNLP's side
from bench_common import (
    RESULTS,
    WORK,
    Clock,
    book_sentences,
    command,
    elmo_nlp,
    gemm_gflops,
    interleaved,
    machine,
    median_run,
    peak_rss_mb,
    random_weights,
    rss_mb,
    sentence_doc,
    serve_worker,
    synthetic,
    timed,
    token_cosines,
    ud_path,
    ud_sentences,
    use_threads,
    write_results,
)
from bench_common import run_worker as run_script_worker

# --shapes names -> what `random-weights` takes
SHAPES = {"small": "elmo-small", "medium": "elmo-medium", "original": "elmo-original"}


# ------------------------------------------------------------------------------------------ setup


def make_inputs(work: Path, shapes: List[str], n_sentences: int, text: Optional[str] = "books") -> Dict[str, Path]:
    """Random weights per shape (seed 1) and, unless ``text`` is None, the benchmark sentences."""
    paths = {shape: random_weights(SHAPES.get(shape, shape), work / f"elmo-{shape}") for shape in shapes}
    sentences = work / f"sentences-{text}-{n_sentences}.txt"
    if text is not None and not sentences.is_file():
        lines = synthetic(n_sentences) if text == "synthetic" else [" ".join(words) for words in real_sentences(text, n_sentences)]
        sentences.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    paths["sentences"] = sentences
    return paths


def real_sentences(text: str, n: int, max_tokens: int = 100) -> List[List[str]]:
    """The first ``n`` sentences (1 to ``max_tokens`` tokens) of the Gutenberg test books or of UD EWT test."""
    if text == "ud":  # gold tokens, a space inside one written as "_" (the sentences are written space-separated)
        return [[w.replace(" ", "_") for w in words] for words in ud_sentences(ud_path("test"), n, max_tokens=max_tokens)]
    if text != "books":
        raise ValueError(f"--text {text!r}: use books, ud or synthetic")
    return book_sentences(n, max_tokens, sample=False)


def macs_per_token(options: Dict[str, Any]) -> Dict[str, float]:
    """Multiply-adds per token of the char CNN (+highway, projection) and of the LSTMs."""
    cnn, lstm = options["char_cnn"], options["lstm"]
    chars, dim = cnn.get("max_characters_per_token", 50), cnn["embedding"]["dim"]
    n_filters = sum(n for _, n in cnn["filters"])
    encoder = sum(w * dim * n * (chars - w + 1) for w, n in cnn["filters"])
    encoder += cnn.get("n_highway", 0) * 2 * n_filters * n_filters + n_filters * lstm["projection_dim"]
    cell, proj = lstm["dim"], lstm["projection_dim"]
    recurrent = 2 * lstm["n_layers"] * (4 * cell * (proj + proj) + cell * proj)
    return {"encoder": float(encoder), "lstm": float(recurrent), "total": float(encoder + recurrent)}


def executed_macs(sentences: List[List[str]], batch: int, max_tokens: Any, macs: Dict[str, float], cache_warm: bool, input_order: bool) -> float:
    """Multiply-adds ``embed_sentences`` actually runs: the char CNN once per distinct word of a
    batch (never with a warm cache), each LSTM direction over ``length + 1`` positions (the
    final boundary step is skipped)."""
    from spacy_elmo.bilm.batching import plan_batches

    groups = [list(range(k, min(k + batch, len(sentences)))) for k in range(0, len(sentences), batch)] if input_order else [list(range(len(sentences)))]
    total = 0.0
    for group in groups:
        chunks = [[group[i] for i in chunk] for chunk in plan_batches([len(sentences[i]) for i in group], batch, max_tokens)]
        for chunk in chunks:
            if not cache_warm:
                total += macs["encoder"] * (len({w for i in chunk for w in sentences[i]}) + 2)
            total += macs["lstm"] * sum(len(sentences[i]) + 1 for i in chunk)
    return total


# ----------------------------------------------------------------------------------------- worker


def cache_counts(bilm: Any) -> Any:
    cache = getattr(bilm, "token_cache", None)
    return None if cache is None else (cache.hits, cache.misses)


def hit_rate(before: Any, after: Any) -> Any:
    """Share of token lookups the cache served during the timed run (None: no cache)."""
    if before is None or after is None:
        return None
    hits, misses = after[0] - before[0], after[1] - before[1]
    return hits / max(1, hits + misses)


def worker(task: Dict[str, Any]) -> Dict[str, Any]:
    """One measurement in this (fresh) process."""
    import torch

    torch.set_num_threads(task["threads"])
    kind = task["kind"]
    if kind == "matmul":
        return {"gflops": gemm_gflops(2048, 2048, 2048)}
    sentences = [line.split() for line in Path(task["sentences"]).read_text().splitlines() if line.strip()]
    sentences = sentences[: task.get("limit") or None]
    n_tokens = sum(map(len, sentences))
    if kind == "train":
        return train_worker(task, sentences)
    from spacy_elmo import load_bilm

    rss_before = peak_rss_mb()
    bilm = load_bilm(task["model"])
    bilm.set_token_cache(task.get("cache", 0))
    if task.get("precision") in ("bfloat16", "int8"):  # bfloat16 or int8 products, float32 state (bench/bf16.py, bench/int8.py)
        bilm.set_inference_precision(task["precision"])
    batch = task["batch_size"]
    if kind == "bf16_accuracy":  # how far bfloat16 outputs are from float32 ones
        reference = bilm.embed_sentences(sentences, batch_size=batch)
        bilm.set_inference_precision("bfloat16")
        fast = bilm.embed_sentences(sentences, batch_size=batch)
        import numpy as np

        cos = token_cosines(reference, fast).ravel()
        return {"mean_cos": float(cos.mean()), "p01_cos": float(np.quantile(cos, 0.01)),
                "max_abs_diff": float(max(np.abs(a - b).max() for a, b in zip(reference, fast) if a.size))}
    if kind == "bilm":  # outputs are dropped batch by batch, as AllenNLP's harness does

        def run(items):
            groups = [items[k : k + batch] for k in range(0, len(items), batch)] if task.get("input_order") else [items]
            for group in groups:  # input order: only each 64-sentence batch is sorted by length
                for _ in bilm.iter_embeddings(group, batch_size=batch, max_batch_tokens=task.get("max_batch_tokens")):
                    pass

        run(sentences if task.get("warm") else sentences[:batch])
        before = cache_counts(bilm)
        _, seconds = timed(run, sentences)
        return {"tokens": n_tokens, "seconds": seconds, "tokens_per_s": n_tokens / seconds, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss_before,
                "cache_hit_rate": hit_rate(before, cache_counts(bilm)),
                "executed_macs": executed_macs(sentences, batch, task.get("max_batch_tokens"), task["macs"], bool(task.get("warm")), bool(task.get("input_order")))}
    if kind == "latency":
        sentence = [w for s in sentences for w in s][:10]
        for _ in range(3):
            bilm.embed_sentences([sentence])
        times = [timed(bilm.embed_sentences, [sentence])[1] for _ in range(task.get("repeats", 30))]
        return {"p50_ms": 1000 * statistics.median(times), "p90_ms": 1000 * sorted(times)[int(0.9 * len(times))]}
    nlp = elmo_nlp(weights=task["model"], token_cache_size=task.get("cache", 0), precision=task.get("precision", "float32"), threads=task["threads"],
                   max_batch_tokens=task.get("max_batch_tokens", max(4096, batch * 80)), store_layers=task.get("store_layers", True))
    nlp.get_pipe("elmo").initialize()

    def docs(items):
        return (sentence_doc(nlp.vocab, words) for words in items)

    if kind == "pipe":  # Docs are made before the clock starts: this times the component
        for _ in nlp.pipe(docs(sentences[: min(batch, 64)]), batch_size=batch):  # warm-up: a token cache starts near cold
            pass
        made = list(docs(sentences))
        component_bilm = nlp.get_pipe("elmo").bilm
        before = cache_counts(component_bilm)
        _, seconds = timed(lambda: sum(1 for _ in nlp.pipe(made, batch_size=batch)))
        return {"tokens": n_tokens, "seconds": seconds, "tokens_per_s": n_tokens / seconds, "peak_rss_mb": peak_rss_mb(),
                "cache_hit_rate": hit_rate(before, cache_counts(component_bilm))}
    if kind == "stream":  # RSS over a long stream of docs
        target, seen, samples = task["stream_tokens"], 0, []
        clock = Clock().start()

        def endless():
            nonlocal seen
            while seen < target:
                for words in sentences:
                    if seen >= target:
                        return
                    seen += len(words)
                    yield from docs([words])

        for i, _ in enumerate(nlp.pipe(endless(), batch_size=batch)):
            if i % 2000 == 0:
                samples.append((seen, rss_mb()))
        warm = [rss for tokens, rss in samples if tokens >= 0.1 * target]
        return {"tokens": seen, "tokens_per_s": seen / clock.elapsed, "rss_samples": samples,
                "rss_growth_after_warmup_mb": (max(warm) - warm[0]) if warm else 0.0, "peak_rss_mb": peak_rss_mb()}
    raise ValueError(kind)


def train_worker(task: Dict[str, Any], sentences: List[List[str]]) -> Dict[str, Any]:
    """LM objective (forward + backward + AdamW) on the shapes of task["model"]."""
    import random
    from collections import Counter

    import torch

    from spacy_elmo import load_bilm
    from spacy_elmo.training.corpus import build_vocab
    from spacy_elmo.training.data import LMBatch, Vocabulary, bucket_batches
    from spacy_elmo.training.lm import BiLMLanguageModel

    counts = Counter(w for s in sentences for w in s)
    tokens = build_vocab(counts)
    vocab = Vocabulary(tokens, [counts[t] for t in tokens])
    model = BiLMLanguageModel(load_bilm(task["model"]), len(vocab), dropout=0.1, n_samples=task.get("n_samples", 0)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = bucket_batches([len(s) for s in sentences], task["max_tokens"], random.Random(0))
    batches = (batches * (1 + (task["steps"] + 2) // len(batches)))[: task["steps"] + 2]  # cycle if few sentences
    steps, n, clock = 0, 0, Clock()
    for index in batches[: task["steps"] + 2]:
        if steps == 2:
            clock, n = Clock().start(), 0
        batch = LMBatch.from_sentences([sentences[i] for i in index], vocab)
        loss, _ = model(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        n += sum(len(sentences[i]) for i in index)
        steps += 1
    seconds = clock.elapsed
    # the multiply-adds actually executed (the char CNN runs once per distinct word of a batch,
    # so the nominal per-token count overstates it), counted on the same timed batches
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        for index in batches[2 : task["steps"] + 2]:
            loss, _ = model(LMBatch.from_sentences([sentences[i] for i in index], vocab))
            loss.backward()
    return {"tokens": n, "seconds": seconds, "tokens_per_s": n / seconds, "vocab": len(vocab), "peak_rss_mb": peak_rss_mb(),
            "counted_gflop_per_s": counter.get_total_flops() / seconds / 1e9}


def run_worker(task: Dict[str, Any]) -> Dict[str, Any]:
    return run_script_worker(__file__, task, dict(os.environ, OMP_NUM_THREADS=str(task["threads"])))


def run_reference(ref_python: str, model: Path, sentences: Path, batch: int, threads: int) -> Dict[str, Any]:
    """AllenNLP's speed on ``sentences`` (bench/reference.py allennlp --bench)."""
    return reference.speed(reference.run(ref_python, "allennlp", "--options", model / "options.json", "--weights", model / "weights.hdf5", "--input",
                                         sentences, "--bench", "--batch-size", batch, "--threads", threads, env=dict(os.environ, OMP_NUM_THREADS=str(threads))))


# ------------------------------------------------------------------------------------- headline

HEADLINE = ("allennlp", "allennlp_b256", "float32", "bfloat16", "component_bfloat16", "component_bfloat16_defaults")
#: ``--int8`` adds these (the int8 products, raw and through the component at nlp.pipe's default batch)
HEADLINE_INT8 = ("int8", "component_int8", "component_int8_defaults")


def headline_run(config: str, base: Dict[str, Any], ref_python: str) -> Dict[str, Any]:
    if config.startswith("allennlp"):
        return run_reference(ref_python, Path(base["model"]), Path(base["sentences"]), 256 if config == "allennlp_b256" else 64, base["threads"])
    if config in ("float32", "bfloat16", "int8"):
        return run_worker({**base, "kind": "bilm", "batch_size": 64, "input_order": True, "precision": config})
    precision = config.split("_")[1]  # component_PRECISION[_defaults]
    batch = 1000 if config.endswith("_defaults") else 64
    return run_worker({**base, "kind": "pipe", "batch_size": batch, "precision": precision, "cache": 0, "max_batch_tokens": 4096})


def headline(args: argparse.Namespace, model: Path, sentences: Path) -> None:
    """``--headline`` (see the module docstring)."""
    lines = [line.split() for line in sentences.read_text(encoding="utf-8").splitlines()]
    macs = macs_per_token(json.loads((model / "options.json").read_text()))
    configs = HEADLINE + (HEADLINE_INT8 if args.int8 else ())
    results: Dict[str, Any] = {
        "machine": machine(),  # the thread counts: under "threads"
        "text": {"source": args.text, "sentences": len(lines), "tokens": sum(map(len, lines))},
        "command": command("bench.py", {"REF_VENV/bin/python": args.ref_python}), "macs_per_token": macs, "threads": {},
    }
    for threads in args.threads:
        use_threads(threads)  # the package's routed products, in this process
        rates = {"fp32_2048": gemm_gflops(2048, 2048, 2048, routed=True), "fp32_step": gemm_gflops(64, 512, 16384, routed=True),
                 "bf16_step": gemm_gflops(64, 512, 16384, "bfloat16", routed=True)}
        base = {"model": str(model), "sentences": str(sentences), "threads": threads, "macs": macs}
        runs = interleaved({c: lambda c=c: headline_run(c, base, args.ref_python) for c in configs}, args.repeats, f"threads {threads} ")
        medians = {config: statistics.median(r["tokens_per_s"] for r in measured) for config, measured in runs.items()}
        roof = rates["fp32_2048"] * 1e9 / (2 * macs["total"])
        results["threads"][str(threads)] = {
            "gemm_gflops": rates, "roof_tokens_per_s": roof, "tokens_per_s": medians,
            "runs": {config: [round(r["tokens_per_s"], 1) for r in measured] for config, measured in runs.items()},
            "peak_rss_mb": {config: statistics.median(r["peak_rss_mb"] for r in measured) for config, measured in runs.items()},
            "speedup": {config: medians[config] / medians["allennlp"] for config in configs if config != "allennlp"},
            "fraction_of_roof": {config: medians[config] / roof for config in configs},
        }
    m, t = results["machine"], results["text"]
    table = [f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}. Text: {t['source']}, {t['sentences']:,} sentences, {t['tokens']:,} tokens; "
             f"original shapes, random weights, batch 64 in input order, token cache off. Command: `{results['command']}`.", "",
             "| threads | AllenNLP 2.10.1 (batch 256) | float32 | bfloat16 | bfloat16 through the component | the same, nlp.pipe's default batch "
             + ("| int8 | int8 through the component | the same, nlp.pipe's default batch " if args.int8 else "")
             + "| float32 roof (2048^3 rate) |", "| ---: " * (len(configs) + 1) + "|"]
    for threads, r in results["threads"].items():
        s, v = r["speedup"], r["tokens_per_s"]
        table.append(f"| {threads} | {v['allennlp']:.0f} ({v['allennlp_b256']:.0f}) | "
                     + " | ".join(f"{v[c]:.0f} ({s[c]:.2f}x)" for c in configs[2:]) + f" | {r['roof_tokens_per_s']:.0f} ({r['gemm_gflops']['fp32_2048']:.0f} GFLOP/s) |")
    table += ["", "tokens/s, median of the rounds (each round runs every column once, in turn); ratios to AllenNLP at batch 64 in the same run."]
    write_results(args.out or RESULTS / "allennlp-speed.json", results, "\n".join(table) + "\n")


# ------------------------------------------------------------------------------------------- main


def main() -> None:
    serve_worker(worker)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="original,small")
    ap.add_argument("--threads", default="2", help="torch threads (--headline: comma-separated counts, each measured)")
    ap.add_argument("--sentences", type=int, default=2000, help="benchmark sentences (batch 64)")
    ap.add_argument("--small-batch-sentences", type=int, default=200, help="sentences for batch sizes 1 and 8")
    ap.add_argument("--text", default="books", choices=["books", "ud", "synthetic"], help="benchmark sentences (see above)")
    ap.add_argument("--ref-sentences", type=int, default=0, help="sentences for AllenNLP; 0 = the same ones as ours (ratios need that)")
    ap.add_argument("--stream-tokens", type=int, default=1_000_000, help="tokens for the RSS stream (small shapes)")
    ap.add_argument("--train-steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each headline figure (the median is reported)")
    ap.add_argument("--ref-python", help="python of a venv with allennlp==2.10.1 (recipe: docs/benchmarks.md)")
    ap.add_argument("--work-dir", type=Path, default=WORK)
    ap.add_argument("--headline", action="store_true", help="the speed headline instead (see above; needs --ref-python)")
    ap.add_argument("--int8", action="store_true", help="with --headline: also int8, raw and through the component")
    ap.add_argument("--out", type=Path, help="default bench/results/bench.json (--headline: allennlp-speed.json)")
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    if args.headline and not args.ref_python or len(args.threads) > 1 and not args.headline:
        ap.error("--headline needs --ref-python; several --threads need --headline")
    shapes = ["original"] if args.headline else args.shapes.split(",")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    paths = make_inputs(args.work_dir, shapes, args.sentences, args.text)
    sentences = paths["sentences"]
    if args.headline:
        return headline(args, paths["original"], sentences)
    # AllenNLP reads the same sentences as ours: in input order (its harness batches them as
    # given) for the input-order rows, and sorted by length for the sorted rows, as ours are
    ref_lines = sentences.read_text(encoding="utf-8").splitlines()[: args.ref_sentences or None]
    ref_sentences = args.work_dir / f"sentences-ref-{args.text}-{len(ref_lines)}.txt"
    ref_sentences.write_text("\n".join(ref_lines) + "\n", encoding="utf-8")
    ref_sorted = ref_sentences.with_name(ref_sentences.stem + "-sorted.txt")
    ref_sorted.write_text("\n".join(sorted(ref_lines, key=lambda line: len(line.split()))) + "\n", encoding="utf-8")
    t = args.threads[0]
    results: Dict[str, Any] = {
        "machine": machine(t),
        "text": {"source": args.text, "sentences": len(sentences.read_text(encoding="utf-8").splitlines()),
                 "tokens": len(sentences.read_text(encoding="utf-8").split()),
                 "types": len(set(sentences.read_text(encoding="utf-8").split())), "ref_sentences": len(ref_lines)},
        "matmul": run_worker({"kind": "matmul", "threads": t}),
        "repeats": args.repeats,
        "shapes": {},
    }
    gflops = results["matmul"]["gflops"]
    print(f"matmul: {gflops:.1f} GFLOP/s on {t} threads", flush=True)
    for shape in shapes:
        model = str(paths[shape])
        macs = macs_per_token(json.loads((paths[shape] / "options.json").read_text()))
        roof = gflops * 1e9 / (2 * macs["total"])
        r: Dict[str, Any] = {"macs_per_token": macs, "roof_tokens_per_s": roof}
        base = {"model": model, "sentences": str(sentences), "threads": t, "macs": macs}
        one = args.work_dir / "sentence-10.txt"
        one.write_text("\n".join([" ".join(sentences.read_text().split()[:10])] * 30) + "\n")
        # the headline figures: repeated, ours and AllenNLP's interleaved (this machine's speed
        # drifts with its neighbours), each reported as the median run
        runs = {
            "bilm_b64": lambda: run_worker({**base, "kind": "bilm", "batch_size": 64}),
            "bilm_b64_input_order": lambda: run_worker({**base, "kind": "bilm", "batch_size": 64, "input_order": True}),
            "bilm_b64_cache_warm": lambda: run_worker({**base, "kind": "bilm", "batch_size": 64, "cache": 50000, "warm": True}),
            "latency_10_tokens": lambda: run_worker({**base, "kind": "latency", "batch_size": 1}),
        }
        if args.ref_python:
            runs["allennlp_b64"] = lambda: run_reference(args.ref_python, paths[shape], ref_sentences, 64, t)
            runs["allennlp_b64_sorted"] = lambda: run_reference(args.ref_python, paths[shape], ref_sorted, 64, t)
            runs["allennlp_b1_10_tokens"] = lambda: run_reference(args.ref_python, paths[shape], one, 1, t)
        r.update({key: median_run(measured) for key, measured in interleaved(runs, args.repeats, f"{shape} ").items()})
        print(f"{shape} batch 64: biLM {r['bilm_b64']['tokens_per_s']:.0f} tok/s (runs {r['bilm_b64']['runs']})", flush=True)
        for bs in (1, 8, 64):
            limit = None if bs == 64 else args.small_batch_sentences
            if bs != 64:
                r[f"bilm_b{bs}"] = run_worker({**base, "kind": "bilm", "batch_size": bs, "limit": limit})
            r[f"pipe_b{bs}"] = run_worker({**base, "kind": "pipe", "batch_size": bs, "limit": limit})
            print(f"{shape} batch {bs}: biLM {r[f'bilm_b{bs}']['tokens_per_s']:.0f} tok/s, nlp.pipe {r[f'pipe_b{bs}']['tokens_per_s']:.0f} tok/s", flush=True)
        r["bilm_budget_4096"] = run_worker({**base, "kind": "bilm", "batch_size": 64, "max_batch_tokens": 4096})
        r["bilm_b64_cache_cold"] = run_worker({**base, "kind": "bilm", "batch_size": 64, "cache": 50000})
        r["bilm_budget_4096_cache_warm"] = run_worker({**base, "kind": "bilm", "batch_size": 64, "max_batch_tokens": 4096, "cache": 50000, "warm": True})
        r["pipe_default_batch"] = run_worker({**base, "kind": "pipe", "batch_size": 1000, "max_batch_tokens": 4096})
        r["pipe_default_batch_cache"] = run_worker({**base, "kind": "pipe", "batch_size": 1000, "max_batch_tokens": 4096, "cache": 20000})
        r["bilm_b64_bf16"] = run_worker({**base, "kind": "bilm", "batch_size": 64, "precision": "bfloat16"})
        r["bf16_accuracy"] = run_worker({**base, "kind": "bf16_accuracy", "batch_size": 64, "limit": args.small_batch_sentences})
        r["fraction_of_roof_b64"] = r["bilm_b64"]["tokens_per_s"] / roof
        r["fraction_of_roof_b64_executed"] = r["bilm_b64"]["executed_macs"] * 2 / r["bilm_b64"]["seconds"] / (gflops * 1e9)
        r["pipe_overhead_b64"] = r["bilm_b64_input_order"]["tokens_per_s"] / r["pipe_b64"]["tokens_per_s"] - 1
        print(f"{shape}: cache warm {r['bilm_b64_cache_warm']['tokens_per_s']:.0f} tok/s, latency p50 {r['latency_10_tokens']['p50_ms']:.1f} ms, "
              f"{100 * r['fraction_of_roof_b64']:.0f}% of roof", flush=True)
        if args.ref_python:
            r["allennlp_b1_10_tokens"]["mean_latency_ms"] = 1000 * r["allennlp_b1_10_tokens"]["seconds"] / r["allennlp_b1_10_tokens"]["sentences"]
            r["speedup_b64"] = r["bilm_b64_input_order"]["tokens_per_s"] / r["allennlp_b64"]["tokens_per_s"]
            r["speedup_b64_sorted"] = r["bilm_b64"]["tokens_per_s"] / r["allennlp_b64_sorted"]["tokens_per_s"]
            r["speedup_b64_cache_warm"] = r["bilm_b64_cache_warm"]["tokens_per_s"] / r["allennlp_b64_sorted"]["tokens_per_s"]
            r["latency_ratio"] = r["latency_10_tokens"]["p50_ms"] / r["allennlp_b1_10_tokens"]["mean_latency_ms"]
            r["rss_ratio_b64"] = r["bilm_b64"]["peak_rss_mb"] / r["allennlp_b64"]["peak_rss_mb"]
            print(f"{shape}: AllenNLP {r['allennlp_b64']['tokens_per_s']:.0f} tok/s -> {r['speedup_b64']:.2f}x "
                  f"({r['speedup_b64_cache_warm']:.2f}x cache warm)", flush=True)
        results["shapes"][shape] = r
    if "small" in shapes and args.stream_tokens:
        results["stream_small"] = run_worker({"kind": "stream", "model": str(paths["small"]), "sentences": str(sentences),
                                              "threads": t, "batch_size": 64, "stream_tokens": args.stream_tokens, "cache": 20000, "store_layers": True})
        print(f"stream: RSS growth after warm-up {results['stream_small']['rss_growth_after_warmup_mb']:.0f} MB", flush=True)
    if "small" in shapes and args.train_steps:
        train = run_worker({"kind": "train", "model": str(paths["small"]), "sentences": str(sentences), "threads": t,
                            "max_tokens": 4096, "steps": args.train_steps, "n_samples": 0})
        macs = results["shapes"]["small"]["macs_per_token"]["total"]
        train["fraction_of_roof"] = train["tokens_per_s"] * 3 * 2 * macs / (gflops * 1e9)  # the issue's nominal count
        train["fraction_of_roof_counted"] = train["counted_gflop_per_s"] / gflops
        results["train_small"] = train
        print(f"training (small): {train['tokens_per_s']:.0f} tok/s, {100 * train['fraction_of_roof']:.0f}% of roof nominal, "
              f"{100 * train['fraction_of_roof_counted']:.0f}% counted", flush=True)
    end = run_worker({"kind": "matmul", "threads": t})
    results["matmul_end"] = end
    if end["gflops"] > gflops:  # the roof is the best rate the machine showed: rescale the fractions
        for r in results["shapes"].values():
            r["fraction_of_roof_b64"] *= gflops / end["gflops"]
            r["fraction_of_roof_b64_executed"] *= gflops / end["gflops"]
            r["roof_tokens_per_s"] *= end["gflops"] / gflops
        if "train_small" in results:
            for key in ("fraction_of_roof", "fraction_of_roof_counted"):
                results["train_small"][key] *= gflops / end["gflops"]
        results["matmul"] = end
    write_results(args.out or RESULTS / "bench.json", results, markdown(results))


def markdown(results: Dict[str, Any]) -> str:
    m = results["machine"]
    text = results.get("text", {"source": "synthetic"})
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['threads']} threads, torch {m['torch']}; "
        f"fp32 matmul {results['matmul']['gflops']:.0f} GFLOP/s (2048^3, best of the start and the end of the run).",
        f"Text: {text['source']}" + (f", {text['sentences']:,} sentences, {text['tokens']:,} tokens, {text['types']:,} word types" if "tokens" in text else "") + ".",
        "",
        "| shapes | measure | spacy-elmo | AllenNLP 2.10.1 | ratio |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for shape, r in results["shapes"].items():
        ref = r.get("allennlp_b64")
        ref1 = r.get("allennlp_b1_10_tokens")

        def row(measure: str, ours: str, theirs: str = "", ratio: str = "") -> None:
            lines.append(f"| {shape} | {measure} | {ours} | {theirs} | {ratio} |")

        def speed_row(measure: str, key: str, ref_key: str = "allennlp_b64_sorted") -> None:
            """Our tokens/s for ``r[key]`` (with its cache hit rate) beside AllenNLP's on the same sentences in the same order."""
            if key not in r:
                return
            ours = r[key]["tokens_per_s"]
            rate = r[key].get("cache_hit_rate")
            label = f"{ours:.0f}" + (f" (cache hits {100 * rate:.0f}%)" if rate is not None else "")
            theirs = r.get(ref_key) or ref
            row(measure, label, f"{theirs['tokens_per_s']:.0f}" if theirs else "", f"{ours / theirs['tokens_per_s']:.2f}x" if theirs else "")

        speed_row("biLM tokens/s, batch 64, sentences sorted by length (AllenNLP given them sorted too)", "bilm_b64")
        speed_row("biLM tokens/s, batch 64 in input order (only each batch sorted, like nlp.pipe; AllenNLP in input order)", "bilm_b64_input_order", "allennlp_b64")
        speed_row("biLM tokens/s, batch 64, token cache on from cold (one pass over the text)", "bilm_b64_cache_cold")
        speed_row("biLM tokens/s, batch 64, token cache warm (a second pass over the same sentences)", "bilm_b64_cache_warm")
        speed_row("biLM tokens/s, token budget 4096 per batch (max_batch_tokens)", "bilm_budget_4096")
        speed_row("the same, token cache warm (second pass)", "bilm_budget_4096_cache_warm")
        row("biLM tokens/s, batch 8 / batch 1", f"{r['bilm_b8']['tokens_per_s']:.0f} / {r['bilm_b1']['tokens_per_s']:.0f}")
        row("nlp.pipe tokens/s, batch 64 / 8 / 1", f"{r['pipe_b64']['tokens_per_s']:.0f} / {r['pipe_b8']['tokens_per_s']:.0f} / {r['pipe_b1']['tokens_per_s']:.0f}",
            "", f"overhead {100 * r['pipe_overhead_b64']:+.0f}% (vs input order)")
        speed_row("nlp.pipe tokens/s, spaCy's default batch of 1,000 Docs, max_batch_tokens 4096", "pipe_default_batch")
        speed_row("the same with the token cache on from cold (the component's defaults)", "pipe_default_batch_cache")
        speed_row("biLM tokens/s, batch 64, bfloat16", "bilm_b64_bf16")
        row("bfloat16 vs float32: cosine per token and layer, mean / 1st percentile",
            f"{r['bf16_accuracy']['mean_cos']:.4f} / {r['bf16_accuracy']['p01_cos']:.4f}")
        row("latency, one 10-token sentence (ms)", f"p50 {r['latency_10_tokens']['p50_ms']:.1f}",
            f"mean {ref1['mean_latency_ms']:.1f}" if ref1 else "", f"{r['latency_ratio']:.2f}x" if ref1 else "")
        row("peak RSS, batch 64 (MB)", f"{r['bilm_b64']['peak_rss_mb']:.0f}", f"{ref['peak_rss_mb']:.0f}" if ref else "",
            f"{r['rss_ratio_b64']:.2f}x" if ref else "")
        row("fraction of the matmul roof, batch 64: nominal (tokens/s / roof) / executed multiply-adds",
            f"{100 * r['fraction_of_roof_b64']:.0f}% / {100 * r['fraction_of_roof_b64_executed']:.0f}%",
            f"{100 * ref['tokens_per_s'] / r['roof_tokens_per_s']:.0f}%" if ref else "")
    if "stream_small" in results:
        s = results["stream_small"]
        lines.append(f"| small | nlp.pipe stream of {s['tokens']:,} tokens: RSS growth after warm-up | {s['rss_growth_after_warmup_mb']:.0f} MB (peak {s['peak_rss_mb']:.0f} MB) | | |")
    if "train_small" in results:
        tr = results["train_small"]
        lines.append(f"| small | training tokens/s (LM objective, full softmax, vocab {tr['vocab']:,}) | {tr['tokens_per_s']:.0f} | | |")
        lines.append(f"| small | training: fraction of the roof, nominal (3x inference per token) / counted (FLOPs executed) "
                     f"| {100 * tr['fraction_of_roof']:.0f}% / {100 * tr['fraction_of_roof_counted']:.0f}% | | |")
    lines += ["", f"Batch-64 rows, cache-warm rows and latencies: median of {results.get('repeats', 1)} runs, ours and AllenNLP's interleaved "
              "(all runs in bench.json)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
