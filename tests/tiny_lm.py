"""A tiny prepared corpus and a tiny biLM with its softmax, for the tests of the tools that read
trained models (``refit-bias``, ``widen``)."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from spacy_elmo.bilm.model import BiLM, BiLMConfig
from spacy_elmo.training.corpus import prepare_corpus
from spacy_elmo.training.data import Vocabulary
from spacy_elmo.training.lm import BiLMLanguageModel
from spacy_elmo.training.trainer import export_model


def skewed_corpus(root: Path, held_out: float = 0.0, n_words: int = 40, n_lines: int = 150) -> Path:
    """``prepare``'s output for lines of words with skewed frequencies (a few common, many rare)."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(n_words)]
    lines = [
        " ".join(rng.choices(words, weights=[1 / (i + 1) for i in range(n_words)], k=rng.randint(3, 9))) + " ." for _ in range(n_lines)
    ]
    (root / "text.txt").write_text("\n".join(lines) + "\n", encoding="utf8")
    prepare_corpus([root / "text.txt"], root / "prep", held_out=held_out)
    return root / "prep"


def tiny_model(folder: Path, vocab: Vocabulary, noise: float = 0.0) -> Path:
    """A model folder (8 cells, projection 4) of a fresh biLM and softmax; ``noise`` adds that much
    Gaussian noise to every weight, so that none is a fresh layer's (zero biases included)."""
    torch.manual_seed(0)
    config = BiLMConfig(lstm_dim=8, projection_dim=4, filters=((1, 4), (2, 4)), n_highway=1)
    lm = BiLMLanguageModel(BiLM(config), len(vocab))
    if noise:
        with torch.no_grad():
            for p in lm.parameters():
                p.add_(torch.randn_like(p) * noise)
    folder.mkdir(parents=True)
    export_model(lm.eval(), vocab, folder)
    return folder
