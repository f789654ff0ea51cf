#!/usr/bin/env python3
"""Published-model figures: tokens/s per published shape, and the download path at full size.

Random weights of each published shape stand in for the real files (the speed does not depend
on the values), written under the published file names into ``--work-dir`` (outside the repo)
and served from a loopback HTTP server acting as ``SPACY_ELMO_MIRROR``. Measured, single thread:

* per shape (small, medium, original; 5.5B and PubMed share the original's shape; and the
  embedded ``en_default`` for comparison):
  ``load_bilm(NAME)`` from the cache, and ``embed_sentences`` tokens/s (token cache off,
  batch 32) over the parity fixture's 30 news sentences, repeated;
* for the Original's size (374 MB): a download cut at half and resumed, the verification a
  download runs (HDF5 datasets and shapes; SHA-256 of the file), and the check a cached load
  runs (size + mtime against ``verified.json``).

    python bench/published.py --work-dir "$(mktemp -d)"   # writes bench/results/published.json

The random files come from ``python -m spacy_elmo random-weights NAME ROOT --mirror --seed 1``
(the published layout, served as a mirror), the weights the other benchmarks use.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from bench_common import REPO, RESULTS, Clock, machine, timed, use_threads, write_results

SHAPES = {"elmo-small": "small", "elmo-medium": "medium", "elmo-original": "original"}


def make_weights(name: str, root: Path) -> Path:
    """Random weights of ``name``'s shape under its published path below ``root``/allennlp."""
    from spacy_elmo.hub import published
    from spacy_elmo.hub.random_weights import write_mirror

    model = published.PUBLISHED[name]
    folder = root / "allennlp" / model.folder
    if not (folder / model.weights_name).is_file():
        write_mirror(name, root / "allennlp", seed=1)
    return folder


def sentences(repeat: int) -> List[List[str]]:
    groups = json.loads((REPO / "tests" / "data" / "elmo-fixture" / "allennlp" / "sentences.json").read_text())
    return [line.split() for group in groups for line in group] * repeat


def embed_seconds(bilm: Any, texts: List[List[str]]) -> float:
    """Seconds of ``embed_sentences`` over ``texts`` (batch 32, token cache off) after a warm-up batch of 8."""
    bilm.set_token_cache(0)
    bilm.embed_sentences(texts[:8], batch_size=8)
    return timed(bilm.embed_sentences, texts, batch_size=32)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "spacy-elmo-published")
    parser.add_argument("--repeat", type=int, default=2, help="passes over the 30 sentences per shape")
    parser.add_argument("--out", type=Path, default=RESULTS / "published.json")
    parser.add_argument("--note", default="", help="a line on the machine's state, stored with the results")
    args = parser.parse_args()

    use_threads(1)
    from spacy_elmo import load_bilm
    from spacy_elmo.bilm.layout import check_hdf5
    from spacy_elmo.hub import download, published
    from tests.loopback_http import LoopbackServer

    served = args.work_dir / "served"
    for name in SHAPES:
        make_weights(name, served)
    cache = args.work_dir / "cache"
    server = LoopbackServer(served)
    os.environ[published.MIRROR_ENV] = server.url + "allennlp/"
    os.environ[published.CACHE_ENV] = str(cache)
    results: Dict[str, Any] = {"machine": machine(1), "note": args.note, "shapes": {}}
    texts = sentences(args.repeat)
    n_tokens = sum(len(s) for s in texts)
    try:
        for name in SHAPES:
            model = published.PUBLISHED[name]
            weights = served / "allennlp" / model.folder / model.weights_name
            row: Dict[str, Any] = {"shape": model.shape, "parameters": published.parameter_count(model.shape),
                                   "weights_bytes": weights.stat().st_size}
            if name == "elmo-original":  # the full download path at the largest size
                cached = published.model_dir(name)
                shutil.rmtree(cached, ignore_errors=True)
                server.cut[f"allennlp/{model.folder}{model.weights_name}"] = row["weights_bytes"] // 2
                with Clock() as cut:
                    try:
                        download.download(name, progress=False)
                    except download.WeightsError as err:
                        row["cut_message"] = str(err)
                row["download_cut_s"] = cut.seconds
                _, row["download_resume_s"] = timed(download.download, name, progress=False)  # second half + checks + SHA-256
                row["requests"] = [list(entry) for entry in server.gets(model.weights_name)]
                config = download.check_files(cached / model.options_name, cached / model.weights_name)
                _, row["verify_hdf5_s"] = timed(check_hdf5, cached / model.weights_name, config)
                _, row["sha256_s"] = timed(download._sha256, cached / model.weights_name)
                cached_now, row["cached_check_s"] = timed(download.is_cached, name)
                assert cached_now
            else:
                download.download(name, progress=False)
            bilm, row["load_s"] = timed(load_bilm, name)
            seconds = embed_seconds(bilm, texts)
            row.update(tokens=n_tokens, embed_s=seconds, tokens_per_s=n_tokens / seconds)
            results["shapes"][name] = row
            print(f"{name}: {row['tokens_per_s']:.0f} tokens/s, load {row['load_s']:.1f} s", flush=True)
            del bilm
        bilm = load_bilm("en_default")  # the embedded default, for comparison
        seconds = embed_seconds(bilm, texts)
        results["shapes"]["en_default"] = {"parameters": sum(p.numel() for p in bilm.parameters()), "tokens": n_tokens,
                                           "embed_s": seconds, "tokens_per_s": n_tokens / seconds}
        print(f"en_default: {n_tokens / seconds:.0f} tokens/s", flush=True)
    finally:
        server.close()
    write_results(args.out, results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
