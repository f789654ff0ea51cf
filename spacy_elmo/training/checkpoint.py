"""Training checkpoints: atomic save, checked load, resume compatibility and the metrics log's rewind.

A checkpoint (``checkpoints/last.pt``) holds the model, the optimizer, the step, the tokens seen,
the data position, the configuration, every rank's RNG state, the minutes already trained and the
precision the run trained in (``fp32``/``bf16``, as ``auto`` resolved on its machine).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

RESUME_MAY_CHANGE = (
    "max_steps",
    "max_minutes",
    "threads",
    "log_every",
    "eval_every",
    "eval_sentences",
    "checkpoint_every",
    "precision",
    "lr_horizons",
    "time_cap_minutes",
    "malloc_tuning",
)
_PATH_FIELDS = ("data_dir", "out_dir", "init_model")
_REQUIRED = ("model", "optimizer", "step", "tokens", "position", "config", "rng")


def checkpoint_path(out_dir: Path) -> Path:
    """Where a run writing into ``out_dir`` keeps its checkpoint."""
    return Path(out_dir) / "checkpoints" / "last.pt"


def save_checkpoint(path: Path, state: Dict[str, Any]) -> None:
    """Write to a temporary file and rename: a crash mid-write keeps the previous checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> Dict[str, Any]:
    """A checkpoint written by :func:`save_checkpoint`, or a ValueError that names the file and the problem."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # torch raises several types for truncated or foreign files
        raise ValueError(
            f"checkpoint {path} cannot be read ({type(err).__name__}: {err}); it is not a spacy-elmo checkpoint or it is "
            "damaged: restore it, or delete it to start the run over"
        ) from err
    missing = [k for k in _REQUIRED if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(f"checkpoint {path} lacks {', '.join(missing)}: it was not written by spacy-elmo's trainer")
    return state


def saved_config(out_dir: Path) -> Optional[Dict[str, Any]]:
    """The configuration of the run whose checkpoint is in ``out_dir`` (None when there is none)."""
    path = checkpoint_path(out_dir)
    return dict(load_checkpoint(path)["config"]) if path.is_file() else None


def resume_conflicts(config: Any, saved: Dict[str, Any]) -> List[str]:
    """Fields where ``config`` (a TrainConfig) differs from the checkpoint's, other than those a resumed run may change."""
    conflicts = []
    for name, value in asdict(config).items():
        if name in RESUME_MAY_CHANGE or name not in saved:
            continue
        old = saved[name]
        if name in _PATH_FIELDS and value is not None and old is not None:
            same = Path(value).resolve() == Path(old).resolve()
        else:
            same = json.dumps(value) == json.dumps(old)
        if not same:
            conflicts.append(f"{name} is {value!r} now but {old!r} in the checkpoint")
    return conflicts


def checkpoint_precision(checkpoint: Dict[str, Any], device: torch.device) -> str:
    """``fp32``, ``fp32-fused`` or ``bf16``: the precision the checkpoint's run trained in. Checkpoints written
    before it was recorded give their configured precision (``auto`` resolved on ``device``)."""
    from .precision import RESOLVED, resolve_precision

    recorded = checkpoint.get("precision")
    if recorded in RESOLVED:
        return str(recorded)
    return resolve_precision(checkpoint["config"].get("precision") or "fp32", device)


def restore_optimizer(optimizer: torch.optim.Optimizer, saved: Dict[str, Any]) -> None:
    """Load ``saved`` (an optimizer state dict) into ``optimizer``, keeping ``optimizer``'s own
    settings: its param groups' flags and hyperparameters (``fused``, ``foreach``, ``lr``, ...)
    are this run's, not those of the run that wrote the checkpoint (which may have used another
    precision, hence another implementation); only the per-parameter state is restored."""
    groups = saved.get("param_groups", [])
    if len(groups) != len(optimizer.param_groups):
        raise ValueError(f"the checkpoint's optimizer has {len(groups)} parameter groups, this run's {len(optimizer.param_groups)}")
    own = [{key: value for key, value in group.items() if key != "params"} for group in optimizer.param_groups]
    optimizer.load_state_dict({**saved, "param_groups": [{**group, **settings} for group, settings in zip(groups, own)]})


def gather_states(state: torch.Tensor, world: int, device: torch.device) -> List[torch.Tensor]:
    """Every rank's copy of a byte tensor (an RNG state), on the CPU."""
    if world == 1:
        return [state]
    local = state.to(device)  # NCCL gathers device tensors only
    parts = [torch.empty_like(local) for _ in range(world)]
    torch.distributed.all_gather(parts, local)
    return [p.cpu() for p in parts]


def truncate_metrics(path: Path, step: int) -> None:
    """Drop the records logged after the checkpoint a run resumes from (they are logged again)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and _record_step(line) <= step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    os.replace(tmp, path)


def _record_step(line: str) -> float:
    try:
        return float(json.loads(line).get("step", 0))
    except (ValueError, AttributeError):
        return math.inf  # a line cut by a kill: dropped
