"""Export a running (or interrupted) training run's last checkpoint as a model folder.

A run exports ``model/`` only when it ends; to evaluate a long run on the way (perplexity,
probes, the ship rule) without stopping it::

    python -m spacy_elmo snapshot RUN_DIR DEST

writes ``DEST`` in the layout of ``RUN_DIR/model`` (biLM, softmax, vocabulary) plus
``train_config.json``, ``snapshot.json`` (the checkpoint's step, tokens and minutes) and, when the
run has a ``metrics.jsonl`` and matplotlib is installed, ``learning_curve.png`` up to that step, so
that ``evaluate``, the benches and ``ship`` take it like a finished run's model.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Dict

import srsly

from .trainer import TrainConfig, build_model, export_model, load_checkpoint, plot_learning_curve, training_vocab


def export_checkpoint(run_dir: Path, dest: Path) -> Dict[str, Any]:
    """``RUN_DIR/checkpoints/last.pt`` -> a model folder at ``dest``; returns step, tokens and minutes."""
    run_dir, dest = Path(run_dir), Path(dest)
    path = run_dir / "checkpoints" / "last.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {run_dir} is not a training run folder with a checkpoint")
    state = load_checkpoint(path)
    known = {f.name for f in fields(TrainConfig)}
    config = TrainConfig(**{k: v for k, v in state["config"].items() if k in known})
    vocab = training_vocab(config)
    model = build_model(config, vocab)
    model.load_state_dict(state["model"])
    dest.mkdir(parents=True, exist_ok=True)
    export_model(model.eval(), vocab, dest)
    info = {"step": state["step"], "tokens": state["tokens"], "elapsed_minutes": state.get("elapsed_minutes", 0.0), "run": run_dir.name}
    srsly.write_json(dest / "snapshot.json", info)
    srsly.write_json(dest / "train_config.json", state["config"])
    if (run_dir / "metrics.jsonl").is_file():
        plot_learning_curve(run_dir / "metrics.jsonl", dest / "learning_curve.png", max_step=state["step"])
    return info
