"""Copy a trained model into a shippable folder (the embedded default's layout).

The layout of ``spacy_elmo/models/en_default``::

    config.json  weights.pt       the biLM (float32)
    vocab.txt    softmax.pt       the softmax (stored in float16: half the size, for fine-tuning
                                  and perplexity; loaded back into float32)
    train_config.json  learning_curve.png

``python -m spacy_elmo.training.ship RUN_DIR DEST`` (RUN_DIR: a ``pretrain``/``finetune`` output
folder, whose ``model/`` holds the export).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Dict

import torch

from .trainer import SOFTMAX_NAME, VOCAB_NAME


def half_softmax(src: Path, dest: Path) -> Path:
    """The softmax state dict with its floating tensors stored as float16."""
    state = torch.load(src, map_location="cpu", weights_only=True)
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in state.items()}, dest)
    return dest


def ship_model(run_dir: Path, dest: Path) -> Dict[str, int]:
    """Copy ``run_dir/model`` (+ train_config.json, learning_curve.png) to ``dest``; sizes in bytes."""
    run_dir, dest = Path(run_dir), Path(dest)
    model = run_dir / "model"
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "weights.pt", VOCAB_NAME):
        shutil.copyfile(model / name, dest / name)
    half_softmax(model / SOFTMAX_NAME, dest / SOFTMAX_NAME)
    for name in ("train_config.json", "learning_curve.png"):
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, dest / name)
    return {p.name: p.stat().st_size for p in sorted(dest.iterdir()) if p.is_file()}


if __name__ == "__main__":
    for name, size in ship_model(Path(sys.argv[1]), Path(sys.argv[2])).items():
        print(f"{name}\t{size / 1e6:.2f} MB")
