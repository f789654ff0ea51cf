#!/usr/bin/env python3
"""Max abs differences against the authors' fixture (tests/data/elmo-fixture), as in the
parity table in docs/evaluations.md:  python bench/parity.py"""
import json

import h5py
import numpy as np
from bench_common import REPO

from spacy_elmo import load_bilm

FIX = REPO / "tests" / "data" / "elmo-fixture"


def top_layer_diffs(name: str, sentence_file: str) -> tuple:
    sentences = json.loads((FIX / name / sentence_file).read_text())
    expected = []
    for k in range(3):
        with h5py.File(FIX / name / f"lm_embeddings_{k}.hdf5", "r") as f:
            expected.append([np.concatenate(f[str(i)][...], axis=-1) for i in range(10)])
    stateless, stateful = load_bilm(FIX / name), load_bilm(FIX / name, stateful=True)
    first = max(float(np.abs(o[2] - expected[k][0]).max()) for k, o in enumerate(stateless.embed_batch([s[0].split() for s in sentences])))
    every = 0.0
    for i in range(10):
        for k, o in enumerate(stateful.embed_batch([s[i].split() for s in sentences])):
            every = max(every, float(np.abs(o[2] - expected[k][i]).max()))
    return first, every


def token_layer_diff() -> float:
    vocab = (FIX / "allennlp" / "vocab_test.txt").read_text().strip().split("\n")
    with h5py.File(FIX / "allennlp" / "elmo_token_embeddings.hdf5", "r") as f:
        expected = f["embedding"][...]
    out = load_bilm(FIX / "allennlp").embed_sentences([[t] for t in vocab], batch_size=50)
    return float(np.abs(np.stack([o[0, 0, :16] for o in out]) - expected).max())


if __name__ == "__main__":
    for name, sentence_file in (("allennlp", "sentences.json"), ("bilm-tf", "lm_embeddings_sentences.json")):
        first, every = top_layer_diffs(name, sentence_file)
        print(f"{name}: top layer, batch 0 stateless {first:.1e}; all 10 batches stateful {every:.1e}")
    print(f"allennlp: context-free token layer (458 tokens) {token_layer_diff():.1e}")
