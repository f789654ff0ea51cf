#!/usr/bin/env python3
"""Load tests of the ``elmo`` component on real text (not run in CI).

    python bench/load.py pipe --tokens 1000000       # nlp.pipe, n_process=1 vs 2: same outputs, flat RSS
    python bench/load.py soak --minutes 30           # threaded nlp() calls with hostile docs mixed in

``pipe`` runs the Gutenberg books of the project's assets (paragraphs as Docs, the sentencizer before
``elmo``) through ``nlp.pipe`` once with one process, keeping every vector in a float32 memmap,
then with two worker processes, comparing each Doc's vectors with the first run, and samples the
resident memory of the main process and its workers as it goes. ``soak`` calls ``nlp()`` from
several threads on one shared pipeline for a fixed time, a hostile doc every few calls, checks
every output (finite, right shape; a probe sentence against its single-threaded vectors) and
logs latency (of the book paragraphs; hostile docs include a 40,000-token one) and resident memory. Both write JSON lines and a plot to bench/results/ (or --out).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import numpy as np
from bench_common import DATA, RESULTS, book_paragraphs, children, elmo_nlp, machine, rss_mb, write_results

from tests.test_hostile import TEXTS as HOSTILE  # the hostile-text corpus of the tests

BOOKS = DATA / "gutenberg_en_books"  # the project's assets

PROBE = "The old sailor kept the letter in his coat, and the king never read it."


def paragraphs(max_tokens: int) -> Iterator[str]:
    """Paragraphs of every Gutenberg book (manifest order), until about ``max_tokens`` whitespace tokens."""
    seen = 0
    for unit in book_paragraphs(BOOKS, max_chars=20_000):
        yield unit
        seen += len(unit.split())
        if seen >= max_tokens:
            return


def tree_rss_mb() -> Dict[str, float]:
    """Private resident MB of this process and of its child processes (the nlp.pipe workers).

    File-backed pages are left out: reading the memory-mapped reference vectors back maps them
    into the resident set, which is page cache the kernel can drop, not memory the process holds.
    """
    return {"main": rss_mb(private=True), "workers": sum(rss_mb(c, private=True) for c in children(os.getpid()))}


def char_cache_entries() -> int:
    from spacy_elmo.bilm.characters import char_cache_info

    return int(char_cache_info().currsize)


def rss_trend(samples: List[Dict[str, Any]], warm: float = 0.1) -> Dict[str, float]:
    """Resident memory after warm-up: slope (MB/minute, least squares) and median of the first and last thirds."""
    rows = [s for s in samples if s["progress"] >= warm]
    if len(rows) < 6:
        return {}
    minutes = np.array([s["s"] / 60 for s in rows])
    mb = np.array([s["main"] for s in rows])
    third = len(rows) // 3
    return {"slope_mb_per_min": float(np.polyfit(minutes, mb, 1)[0]), "median_first_third_mb": float(np.median(mb[:third])),
            "median_last_third_mb": float(np.median(mb[-third:])), "max_first_third_mb": float(mb[:third].max()),
            "max_last_third_mb": float(mb[-third:].max())}


def growth_after_warmup(samples: List[Dict[str, Any]], key: str, warm: float = 0.1) -> float:
    """Largest rise of ``key`` over its first value after the first ``warm`` share of the run."""
    values = [s[key] for s in samples if s["progress"] >= warm]
    return (max(values) - values[0]) if values else 0.0


def pipe(args: argparse.Namespace) -> Dict[str, Any]:
    texts = list(paragraphs(args.tokens))
    nlp = elmo_nlp(True, threads=1)
    work = Path(tempfile.mkdtemp(prefix="spacy-elmo-load-"))
    runs: Dict[str, Any] = {}
    reference: Any = None
    offsets: List[int] = []
    store = (work / "reference.f32").open("wb")  # the one-process vectors, appended Doc by Doc
    for n_process in (1, 2):
        samples: List[Dict[str, Any]] = []
        tokens = position = 0
        worst = 0.0
        start = time.perf_counter()
        for i, doc in enumerate(nlp.pipe(texts, n_process=n_process, batch_size=args.batch_size)):
            vectors = doc.tensor
            if n_process == 1:
                offsets.append(position)
                store.write(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
            else:
                expected = reference[offsets[i] : offsets[i] + len(doc)]
                if expected.shape != vectors.shape:
                    raise AssertionError(f"doc {i}: shape {vectors.shape} with 2 processes, {expected.shape} with 1")
                if len(doc):
                    worst = max(worst, float(np.abs(expected - vectors).max()))
            position += len(doc)
            tokens += len(doc)
            if i % 200 == 0:
                samples.append({"tokens": tokens, "progress": tokens / max(1, args.tokens), "s": time.perf_counter() - start, **tree_rss_mb()})
        seconds = time.perf_counter() - start
        if n_process == 1:
            store.close()
            reference = np.memmap(work / "reference.f32", np.float32, "r").reshape(position, -1)
        runs[f"n_process={n_process}"] = {
            "docs": len(texts), "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "rss_growth_after_warmup_mb": {k: growth_after_warmup(samples, k) for k in ("main", "workers")},
            "samples": samples, **({"max_abs_diff_vs_1_process": worst} if n_process == 2 else {}),
        }
        print(f"n_process={n_process}: {tokens:,} tokens in {seconds:.0f} s ({tokens / seconds:.0f}/s); "
              f"RSS growth after warm-up {runs[f'n_process={n_process}']['rss_growth_after_warmup_mb']}", flush=True)
    print(f"max abs difference, 2 processes vs 1: {runs['n_process=2']['max_abs_diff_vs_1_process']:.2e}")
    return {"kind": "pipe", "runs": runs}


def soak(args: argparse.Namespace) -> Dict[str, Any]:
    texts = list(paragraphs(200_000))
    hostile = list(HOSTILE.values())
    nlp = elmo_nlp(True, threads=1)
    probe = nlp(PROBE).tensor.copy()
    stop = time.time() + 60 * args.minutes
    lock = threading.Lock()
    calls: List[Dict[str, Any]] = []
    errors: List[str] = []

    def client(seed: int) -> None:
        rng = random.Random(seed)
        while time.time() < stop:
            kind = rng.random()
            text = hostile[rng.randrange(len(hostile))] if kind < 0.1 else PROBE if kind < 0.2 else texts[rng.randrange(len(texts))]
            t0 = time.perf_counter()
            try:
                doc = nlp(text)
                ok = doc.tensor.shape == (len(doc), probe.shape[1]) and bool(np.isfinite(doc.tensor).all())
                if text is PROBE:
                    ok = ok and float(np.abs(doc.tensor - probe).max()) < 1e-5
                if not ok:
                    errors.append(f"bad output for {text[:40]!r}")
            except Exception as err:  # a soak records every failure and keeps going
                errors.append(f"{type(err).__name__}: {err} for {text[:40]!r}")
            with lock:
                calls.append({"t": time.time(), "ms": 1000 * (time.perf_counter() - t0), "kind": "hostile" if kind < 0.1 else "book",
                              "tokens": len(text.split())})

    threads = [threading.Thread(target=client, args=(seed,), daemon=True) for seed in range(args.threads)]
    start = time.time()
    for thread in threads:
        thread.start()
    samples: List[Dict[str, Any]] = []
    while any(thread.is_alive() for thread in threads):
        time.sleep(args.sample_every)
        with lock:
            recent = [c["ms"] for c in calls if c["t"] > time.time() - args.sample_every and c["kind"] == "book"]
        cache = nlp.get_pipe("elmo").bilm.token_cache
        samples.append({"s": time.time() - start, "progress": (time.time() - start) / (60 * args.minutes), "main": rss_mb(private=True),
                        "char_cache_entries": char_cache_entries(), "token_cache_entries": len(cache) if cache is not None else 0,
                        "calls": len(calls), "p50_ms": statistics.median(recent) if recent else None,
                        "p99_ms": float(np.quantile(recent, 0.99)) if recent else None, "errors": len(errors)})
        print(f"{samples[-1]['s']:.0f} s: {len(calls):,} calls, RSS {samples[-1]['main']:.0f} MB, p50 {samples[-1]['p50_ms']} ms, errors {len(errors)}", flush=True)
    by_kind = {k: [c["ms"] for c in calls if c["kind"] == k] for k in ("book", "hostile")}
    latency = {k: {"calls": len(v), "p50_ms": statistics.median(v), "p99_ms": float(np.quantile(v, 0.99))} for k, v in by_kind.items() if v}
    return {"kind": "soak", "minutes": args.minutes, "threads": args.threads, "calls": len(calls), "latency": latency, "errors": errors[:20], "n_errors": len(errors),
            "rss_growth_after_warmup_mb": growth_after_warmup(samples, "main"), "rss_trend": rss_trend(samples), "samples": samples}


def plot(result: Dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if result["kind"] == "pipe":
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, run in result["runs"].items():
            xs = [s["tokens"] / 1e6 for s in run["samples"]]
            ax.plot(xs, [s["main"] for s in run["samples"]], label=f"{name}: main process")
            if name != "n_process=1":
                ax.plot(xs, [s["workers"] for s in run["samples"]], "--", label=f"{name}: both workers")
        ax.set_xlabel("tokens processed (millions)")
        ax.set_ylabel("private resident memory (MB)")
        ax.set_title("nlp.pipe over the Gutenberg books")
        ax.legend()
    else:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
        xs = [s["s"] / 60 for s in result["samples"]]
        top.plot(xs, [s["main"] for s in result["samples"]])
        top.set_ylabel("resident memory (MB)")
        top.set_title(f"soak: {result['threads']} threads calling nlp(), hostile docs mixed in")
        bottom.plot(xs, [s["p50_ms"] for s in result["samples"]], label="p50 (book paragraphs)")
        bottom.plot(xs, [s["p99_ms"] for s in result["samples"]], label="p99 (book paragraphs)")
        bottom.set_ylabel("latency per call (ms)")
        bottom.set_xlabel("minutes")
        bottom.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["pipe", "soak"])
    ap.add_argument("--tokens", type=int, default=1_000_000, help="pipe: tokens of book text")
    ap.add_argument("--batch-size", type=int, default=64, help="pipe: nlp.pipe batch size")
    ap.add_argument("--minutes", type=float, default=30.0, help="soak: duration")
    ap.add_argument("--threads", type=int, default=4, help="soak: client threads")
    ap.add_argument("--sample-every", type=float, default=10.0, help="soak: seconds between samples")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    result = pipe(args) if args.kind == "pipe" else soak(args)
    write_results(args.out / f"load-{args.kind}.json", {**result, "machine": machine()})
    plot(result, args.out / f"load-{args.kind}.png")
    print(f"wrote {args.out / f'load-{args.kind}.json'} and .png")


if __name__ == "__main__":
    main()
