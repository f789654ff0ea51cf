"""Average biLMs that continued one model: a uniform model soup (Wortsman et al. 2022).

Two fine-tuning runs from the same weights, at a low learning rate and on different orders of
the corpus (``finetune --seed``), end close to each other in weight space; the mean of their
weights is a model of its own, often better than either (each run's noise from its batches
averages out, as in checkpoint averaging). ::

    python -m spacy_elmo average training/leg-a training/leg-b --out training/leg-soup

Each input is a training run folder (its ``model/``) or a model folder with a softmax and
vocabulary (``finetune``'s or ``snapshot``'s export). Every input's weights are verified against
their recorded SHA-256 on load; the inputs must share the shape and the vocabulary (the same tokens in
the same order), and so every parameter's name and size. The mean is taken in float64 and written in the
native layout (``config.json`` with the new weights' digest, ``weights.pt``, ``softmax.pt``,
``vocab.txt``) plus ``soup.json`` naming the inputs and their digests; ``ship`` takes the result
like any run's model. Whether a soup is better than its inputs is a measurement, not a promise:
the project measures it (docs/model-card.md, "Sibling legs").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Sequence

import torch

from ..bilm.weights import file_sha256
from ..files import replace_folder, write_json
from .ship import model_folder
from .trainer import export_model, load_language_model

SOUP_NAME = "soup.json"


def _options(folder: Path) -> Dict[str, Any]:
    return json.loads((folder / "config.json").read_text(encoding="utf8"))["options"]


def average_models(inputs: Sequence[Path], out: Path) -> Dict[str, Any]:
    """Write the uniform average of the models in ``inputs`` (run folders or model folders) to ``out``;
    returns what ``soup.json`` records. ``out`` is replaced whole when complete."""
    folders = [model_folder(Path(p)) for p in inputs]
    if len(folders) < 2:
        raise ValueError(f"averaging needs two or more models, got {len(folders)}")
    if len({f.resolve() for f in folders}) < len(folders):
        raise ValueError("the same model is named twice: average distinct runs")
    first_options = _options(folders[0])
    for folder in folders[1:]:
        if _options(folder) != first_options:
            raise ValueError(
                f"{folder} has another shape than {folders[0]} (config.json's options differ): only models of one shape average"
            )
    models, vocabs = zip(*(load_language_model(f) for f in folders))  # each verified against its recorded digest
    for folder, vocab in zip(folders[1:], vocabs[1:]):
        if vocab.tokens != vocabs[0].tokens:
            raise ValueError(f"{folder}'s vocabulary differs from {folders[0]}'s: only runs that continued one model average")
    states = [m.state_dict() for m in models]  # one shape and one vocabulary: the same parameters
    mean = {
        k: (torch.stack([s[k].double() for s in states]).mean(0)).to(v.dtype) if torch.is_floating_point(v) else v.clone()
        for k, v in states[0].items()
    }
    model = models[0]
    model.load_state_dict(mean)

    def write(staging: Path) -> Dict[str, Any]:
        export_model(model, vocabs[0], staging)
        record: Dict[str, Any] = {
            "inputs": [{"path": str(Path(p)), "weights_sha256": file_sha256(f / "weights.pt")} for p, f in zip(inputs, folders)],
            "weights_sha256": file_sha256(staging / "weights.pt"),
        }
        write_json(staging / SOUP_NAME, record, indent=1)
        return record

    return replace_folder(out, write)
