#!/usr/bin/env python3
"""Nearest-neighbour search over token occurrences: corpus embedding, exact vs approximate at 1M
occurrences, and the paper's "play" example.

The corpus: paragraphs of the Gutenberg books (the project's assets, project/assets/data/gutenberg_en_books, training books in
manifest order), tokenised by spaCy's English tokenizer, split by the sentencizer and embedded
once with the ``elmo`` component (the embedded default model, its default mix); the vectors are
cached in the system temp folder (not in the repository). Queries are the first non-space tokens
of paragraphs that come after the indexed ones (not in the index).

    python bench/neighbours.py embed --tokens 1000000        # once: cache the corpus vectors
    python bench/neighbours.py measure --n 1000000           # exact vs hnswlib (the chosen one)
    python bench/neighbours.py play                          # the "play" nearest-neighbour table
    python bench/neighbours.py embed --layer layer:2         # the same corpus indexed by the top layer
    python bench/neighbours.py play --layer layer:2

Every command writes its numbers to bench/results/neighbours*.json (``--json`` to change).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
from bench_common import DATA, RESULTS, book_paragraphs, elmo_nlp, machine, timed, use_threads, write_results

BOOKS = DATA / "gutenberg_en_books"
CACHE = Path(tempfile.gettempdir()) / "spacy_elmo_cache" / "neighbours"
N_QUERIES = 1000


def pipeline(layer=None):
    return elmo_nlp(True, store_layers=layer is not None)


def index_folder(cache: Path, layer) -> Path:
    """The cached exact index of a layer choice: ``exact`` for the doc.tensor mix, ``exact-layer2`` ..."""
    return cache / ("exact" if layer is None else "exact-" + str(layer).replace(":", ""))


def embed(n_tokens: int, cache: Path, books: Path = BOOKS, layer=None) -> None:
    """Embed paragraphs until ``n_tokens`` non-space tokens are indexed, then ~N_QUERIES query tokens
    (the queries only for the doc.tensor mix, which the ANN measurements use)."""
    from spacy_elmo.search.index import TokenIndex

    nlp = pipeline(layer)
    index = TokenIndex(layer=layer)
    queries: List[Tuple[np.ndarray, str, str]] = []
    start = last = time.time()
    texts = book_paragraphs(books, "train")
    for doc in nlp.pipe(texts, batch_size=64):
        if len(index) < n_tokens:
            index.add_docs([doc])
        elif layer is not None:
            break
        else:
            token = next((t for t in doc if not t.is_space and t.is_alpha), None)
            if token is not None:
                queries.append((doc.tensor[token.i].copy(), token.text, token.sent.text))
            if len(queries) >= N_QUERIES:
                break
        if time.time() - last > 60:
            last = time.time()
            print(f"{len(index):,} occurrences, {len(queries)} queries, {time.time() - start:.0f} s", flush=True)
    seconds = time.time() - start
    index.save(index_folder(cache, layer))
    if layer is not None:
        print(f"embedded {len(index):,} occurrences ({layer}) in {seconds:.0f} s")
        return
    np.save(cache / "queries.npy", np.stack([q[0] for q in queries]))
    (cache / "queries.json").write_text(json.dumps([[q[1], q[2]] for q in queries]))
    (cache / "embed.json").write_text(json.dumps({"occurrences": len(index), "seconds": seconds, "docs": index._next_doc}))
    print(f"embedded {len(index):,} occurrences in {seconds:.0f} s ({len(index) / seconds:.0f} tokens/s)")


def _latency(search_one, queries: np.ndarray, n: int = 200) -> float:
    """Median seconds of one single-vector query."""
    times = []
    for q in queries[:n]:
        start = time.perf_counter()
        search_one(q[None])
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def measure(n: int, cache: Path, k: int, M: int, ef_construction: int, ef_values: List[int]) -> Dict[str, object]:
    """Exact vs the chosen ANN backend through TokenIndex: build, save, load, query, recall."""
    from spacy_elmo.search.index import TokenIndex, recall_at_k

    source = TokenIndex.load(cache / "exact", mmap=False)
    queries = np.load(cache / "queries.npy")
    if len(source) < n:
        raise SystemExit(f"the cached index has {len(source):,} occurrences, fewer than --n {n:,}: embed with --tokens {n}")
    exact_scores, exact_ids = source.search(queries, k)
    exact_batch = timed(source.search, queries, k)[1]
    exact_latency = _latency(lambda q: source.search(q, k), queries, 50)
    source.backend = "hnswlib"
    source.ann_params.update(M=M, ef_construction=ef_construction, ef=ef_values[0], threads=1)
    _, build_s = timed(source.build)
    folder = cache / "hnsw"
    _, save_s = timed(source.save, folder)
    loaded, load_s = timed(TokenIndex.load, folder)
    rows = {}
    for ef in ef_values:
        loaded._ann.ef = ef
        _, ids = loaded.search(queries, k)
        rows[f"ef={ef}"] = {"recall_at_k": recall_at_k(ids, exact_ids), "latency_ms": 1000 * _latency(lambda q: loaded.search(q, k), queries)}
        print(ef, rows[f"ef={ef}"], flush=True)
    size = sum(f.stat().st_size for f in folder.iterdir())
    return {"occurrences": len(source), "queries": len(queries), "k": k, "threads": 1, "M": M, "ef_construction": ef_construction,
            "exact": {"latency_ms": 1000 * exact_latency, "batch_ms_per_query": 1000 * exact_batch / len(queries)},
            "hnswlib": {"build_s": build_s, "save_s": save_s, "load_s": load_s, "folder_mb": size / 1e6, "by_ef": rows}}


PLAY_QUERIES = [
    "Chico Ruiz made a spectacular play on Alusik's grounder.",
    "Olivia De Havilland signed to do a Broadway play for Garson.",
    "The children went out to play in the garden.",
]


def play(cache: Path, k: int, layer=None) -> Dict[str, object]:
    from spacy_elmo.search.index import TokenIndex

    index = TokenIndex.load(index_folder(cache, layer), mmap=True)
    nlp = pipeline(layer)
    out = []
    for text in PLAY_QUERIES:
        doc = nlp(text)
        token = next(t for t in doc if t.lower_ == "play")
        entry = {"query": text}
        for key, hits in (("neighbours", index.query(token, k=k)), ("neighbours_play_only", index.query(token, k=k, word="play"))):
            entry[key] = [{"score": h.score, "text": h.text, "doc": h.doc, "sentence": h.sentence, "token": h.token, "context": h.context} for h in hits]
            print(f"\n{text} ({'all occurrences' if key == 'neighbours' else 'occurrences of play'})")
            for h in hits:
                print(f"  {h.score:.3f}  {h.text!r:>10}  {(h.context or '').strip()}")
        out.append(entry)
    return {"occurrences": len(index), "k": k, "layer": layer, "results": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=("embed", "measure", "play"))
    ap.add_argument("--tokens", type=int, default=1_000_000, help="embed: occurrences to index")
    ap.add_argument("--n", type=int, default=200_000, help="measure: occurrences")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=100)
    ap.add_argument("--ef", type=int, nargs="+", default=[64])
    ap.add_argument("--cache", type=Path, default=CACHE, help="where the embedded corpus and the indexes are kept")
    ap.add_argument("--books", type=Path, default=BOOKS, help="the Gutenberg books folder (manifest.tsv + books/)")
    ap.add_argument("--layer", help="embed/play: index this layer choice (layer:N, top, average) instead of the doc.tensor mix")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    use_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.step == "embed":
        embed(args.tokens, args.cache, args.books, args.layer)
        return
    if args.step == "measure":
        report = measure(args.n, args.cache, args.k, args.M, args.ef_construction, args.ef)
        default = RESULTS / "neighbours-1m.json"
    else:
        report = play(args.cache, args.k, args.layer)
        default = RESULTS / ("neighbours-play.json" if args.layer is None else f"neighbours-play-{args.layer.replace(':', '')}.json")
    report["embedding"] = json.loads((args.cache / "embed.json").read_text())
    report["machine"] = machine(1)
    write_results(args.json or default, report)
    print(f"-> {args.json or default}")


if __name__ == "__main__":
    main()
