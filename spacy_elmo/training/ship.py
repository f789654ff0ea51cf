"""Copy a trained model into a shippable folder (the embedded default's layout).

The layout of ``spacy_elmo/models/en_default``::

    config.json  weights.pt       the biLM (float32)
    vocab.txt    softmax.pt       the softmax (stored in float16: half the size, for fine-tuning
                                  and perplexity; loaded back into float32)
    train_config.json  learning_curve.png

``python -m spacy_elmo ship RUN_DIR DEST`` (RUN_DIR: a ``pretrain``/``finetune`` output folder,
whose ``model/`` holds the export, or a model folder such as a ``snapshot`` export, whose
``snapshot.json`` is kept). Absolute paths in ``train_config.json`` are reduced to their last
component, so that a shipped model names no folder of the machine that trained it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict

import srsly
import torch

from .trainer import SOFTMAX_NAME, VOCAB_NAME


def half_softmax(src: Path, dest: Path) -> Path:
    """The softmax state dict with its floating tensors stored as float16."""
    state = torch.load(src, map_location="cpu", weights_only=True)
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in state.items()}, dest)
    return dest


def model_folder(run_dir: Path) -> Path:
    """The folder holding the biLM: ``run_dir/model`` for a finished run, else ``run_dir`` itself."""
    run_dir = Path(run_dir)
    for folder in (run_dir / "model", run_dir):
        if (folder / "weights.pt").is_file():
            return folder
    raise FileNotFoundError(
        f"{run_dir} has neither model/weights.pt nor weights.pt: pass the output folder of pretrain or finetune "
        "after it finished, or a model folder (e.g. one written by the `snapshot` command)"
    )


def portable_config(config: Dict[str, Any]) -> Dict[str, Any]:
    """``config`` with every absolute path value reduced to its last component."""
    return {k: Path(v).name if isinstance(v, str) and Path(v).is_absolute() else v for k, v in config.items()}


def ship_model(run_dir: Path, dest: Path) -> Dict[str, int]:
    """Copy the model of ``run_dir`` (+ train_config.json, learning_curve.png) to ``dest``; sizes in bytes."""
    run_dir, dest = Path(run_dir), Path(dest)
    model = model_folder(run_dir)
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "weights.pt", VOCAB_NAME):
        shutil.copyfile(model / name, dest / name)
    half_softmax(model / SOFTMAX_NAME, dest / SOFTMAX_NAME)
    if (run_dir / "train_config.json").is_file():
        srsly.write_json(dest / "train_config.json", portable_config(srsly.read_json(run_dir / "train_config.json")))
    for name in ("learning_curve.png", "snapshot.json"):
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, dest / name)
    return {p.name: p.stat().st_size for p in sorted(dest.iterdir()) if p.is_file()}
