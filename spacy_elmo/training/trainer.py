"""Pretraining and fine-tuning loop for the biLM language model.

One readable loop: build or load the model, stream bucketed batches, step the optimizer,
log, evaluate, checkpoint atomically, and resume exactly (model, optimizer, schedule, RNG and
data position). Runs alone or under ``torchrun`` with DistributedDataParallel (gloo on CPU,
nccl on GPU); on a GPU ``amp=True`` uses bfloat16 autocast.

Output folder::

    train_config.json  vocab.txt  metrics.jsonl  learning_curve.png
    checkpoints/last.pt            (replaced atomically)
    model/                         the exported biLM (native format) + softmax.pt + vocab.txt
"""
from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import srsly
import torch
from torch import nn
from tqdm import tqdm

from ..bilm import BiLM, BiLMConfig, load_bilm, save_native
from .data import Position, Vocabulary, evaluation_batches, training_batches
from .lm import BiLMLanguageModel
from .precision import train_dtype

SOFTMAX_NAME, VOCAB_NAME = "softmax.pt", "vocab.txt"


@dataclass
class TrainConfig:
    """Everything that defines a run (saved as train_config.json)."""

    data_dir: str = ""
    out_dir: str = ""
    init_model: Optional[str] = None  # fine-tune from this biLM directory
    # architecture (ignored when init_model is set)
    lstm_dim: int = 512
    projection_dim: int = 128
    n_layers: int = 2
    cell_clip: float = 3.0
    proj_clip: float = 3.0
    use_skip_connections: bool = True
    char_dim: int = 16
    filters: List[List[int]] = field(default_factory=lambda: [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256]])
    n_highway: int = 1
    # objective and optimisation
    n_samples: int = 0  # 0 = full softmax; else sampled softmax with this many candidates
    dropout: float = 0.1
    lr: float = 2e-3
    weight_decay: float = 0.0
    warmup_steps: int = 200
    max_steps: int = 1000
    max_minutes: float = 0.0  # stop (and export) after this wall time; 0 = no limit
    max_tokens: int = 4096  # token budget per batch (rows * (longest + 2)), per process
    max_length: int = 50
    grad_clip: float = 1.0
    seed: int = 0
    # bookkeeping
    log_every: int = 20
    eval_every: int = 200
    eval_sentences: int = 2000
    checkpoint_every: int = 200
    threads: int = 0
    amp: bool = False
    precision: str = "fp32"  # training products: fp32, bf16, or auto (bf16 where the CPU has native bf16)


def _distributed() -> Tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        torch.distributed.init_process_group(backend=backend)
    rank = torch.distributed.get_rank() if world > 1 else 0
    return rank, world


def build_model(config: TrainConfig, vocab: Vocabulary) -> BiLMLanguageModel:
    """A fresh model from the config, or the biLM of ``init_model`` with its (or a new) softmax."""
    if config.init_model is None:
        bilm = BiLM(
            BiLMConfig(
                lstm_dim=config.lstm_dim,
                projection_dim=config.projection_dim,
                n_layers=config.n_layers,
                cell_clip=config.cell_clip or None,
                proj_clip=config.proj_clip or None,
                use_skip_connections=config.use_skip_connections,
                char_dim=config.char_dim,
                filters=tuple((int(w), int(n)) for w, n in config.filters),
                n_highway=config.n_highway,
            )
        )
        return BiLMLanguageModel(bilm, len(vocab), dropout=config.dropout, n_samples=config.n_samples)
    bilm = load_bilm(config.init_model)
    model = BiLMLanguageModel(bilm, len(vocab), dropout=config.dropout, n_samples=config.n_samples)
    softmax = Path(config.init_model) / SOFTMAX_NAME
    if softmax.is_file():
        model.softmax.load_state_dict(torch.load(softmax, map_location="cpu", weights_only=True))
    else:
        model.init_softmax_from_encoder(vocab.tokens, vocab.counts)
    return model


def training_vocab(config: TrainConfig) -> Vocabulary:
    """The init model's vocabulary when it has one (kept when fine-tuning), else the corpus's."""
    if config.init_model is not None and (Path(config.init_model) / VOCAB_NAME).is_file():
        return Vocabulary.load(Path(config.init_model) / VOCAB_NAME)
    return Vocabulary.load(Path(config.data_dir) / VOCAB_NAME)


def lr_at(step: int, config: TrainConfig, elapsed_minutes: float = 0.0) -> float:
    """Linear warm-up, then cosine decay to 10% of ``lr`` at ``max_steps``.

    With a time budget (``max_minutes``) the decay follows whichever runs out first, steps or
    time, so a budgeted run still ends at the low learning rate (such runs are not bit-for-bit
    reproducible, since their schedule depends on the machine's speed).
    """
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps))
    if config.max_minutes:
        progress = max(progress, min(1.0, elapsed_minutes / config.max_minutes))
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def save_checkpoint(path: Path, state: Dict[str, Any]) -> None:
    """Write to a temporary file and rename: a crash mid-write keeps the previous checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


RESUME_MAY_CHANGE = (
    "max_steps", "max_minutes", "threads", "log_every", "eval_every", "eval_sentences", "checkpoint_every", "precision",
)
_PATH_FIELDS = ("data_dir", "out_dir", "init_model")


def load_checkpoint(path: Path) -> Dict[str, Any]:
    """A checkpoint written by :func:`save_checkpoint`, or a ValueError that names the file and the problem."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # torch raises several types for truncated or foreign files
        raise ValueError(
            f"checkpoint {path} cannot be read ({type(err).__name__}: {err}); it is not a spacy-elmo checkpoint or it is "
            "damaged: restore it, or delete it to start the run over"
        ) from err
    missing = [k for k in ("model", "optimizer", "step", "tokens", "position", "config", "rng") if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(f"checkpoint {path} lacks {', '.join(missing)}: it was not written by spacy-elmo's trainer")
    return state


def saved_config(out_dir: Path) -> Optional[Dict[str, Any]]:
    """The configuration of the run whose checkpoint is in ``out_dir`` (None when there is none)."""
    path = Path(out_dir) / "checkpoints" / "last.pt"
    return dict(load_checkpoint(path)["config"]) if path.is_file() else None


def resume_conflicts(config: TrainConfig, saved: Dict[str, Any]) -> List[str]:
    """Fields where ``config`` differs from the checkpoint's, other than those a resumed run may change."""
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


def _gather(state: torch.Tensor, world: int, device: torch.device) -> List[torch.Tensor]:
    """Every rank's copy of a byte tensor (an RNG state), on the CPU."""
    if world == 1:
        return [state]
    local = state.to(device)  # NCCL gathers device tensors only
    parts = [torch.empty_like(local) for _ in range(world)]
    torch.distributed.all_gather(parts, local)
    return [p.cpu() for p in parts]


def export_model(model: BiLMLanguageModel, vocab: Vocabulary, out_dir: Path) -> Path:
    """The biLM in our native format, plus the softmax and vocabulary for later fine-tuning."""
    save_native(model.bilm, out_dir)
    torch.save({k: v.detach().cpu() for k, v in model.softmax.state_dict().items()}, out_dir / SOFTMAX_NAME)
    vocab.save(out_dir / VOCAB_NAME)
    return out_dir


def load_language_model(model_dir: Path) -> Tuple[BiLMLanguageModel, Vocabulary]:
    """An exported model with its softmax and vocabulary, ready for :func:`perplexity`."""
    model_dir = Path(model_dir)
    if not (model_dir / SOFTMAX_NAME).is_file():
        raise FileNotFoundError(f"{model_dir} has no {SOFTMAX_NAME}: perplexity needs a model trained by spacy-elmo")
    vocab = Vocabulary.load(model_dir / VOCAB_NAME)
    model = BiLMLanguageModel(load_bilm(model_dir), len(vocab))
    model.softmax.load_state_dict(torch.load(model_dir / SOFTMAX_NAME, map_location="cpu", weights_only=True))
    return model.eval(), vocab


@torch.no_grad()
def perplexity(
    model: BiLMLanguageModel, vocab: Vocabulary, data_dir: Path, split: str, max_tokens: int = 4096, max_length: int = 50, limit: int = 0
) -> Dict[str, float]:
    """Exact (full-softmax) held-out perplexity: forward, backward and their mean."""
    was_training = model.training
    model.eval()
    fwd = bwd = 0.0
    count = 0
    for batch in evaluation_batches(Path(data_dir), split, vocab, max_tokens, max_length, limit):
        f, b, n = model.nll(batch)
        fwd, bwd, count = fwd + f, bwd + b, count + n
    model.train(was_training)
    if count == 0:
        raise ValueError(f"no {split} sentences in {data_dir}")
    ppl_f, ppl_b = math.exp(fwd / count), math.exp(bwd / count)
    return {"ppl_fwd": ppl_f, "ppl_bwd": ppl_b, "ppl_avg": (ppl_f + ppl_b) / 2, "tokens": count}


def train(
    config: TrainConfig, resume: bool = False, dump_weights: Optional[Path] = None, interrupt_at: Optional[int] = None
) -> Dict[str, Any]:
    """Run (or resume) a training job; returns the final metrics.

    ``interrupt_at``: stop right after that step as an interrupted run would (checkpoint, no
    export), so that ``resume=True`` can continue it.
    """
    rank, world = _distributed()
    main = rank == 0
    out = Path(config.out_dir)
    checkpoint_path = out / "checkpoints" / "last.pt"
    if config.threads:
        torch.set_num_threads(config.threads)
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu")
    checkpoint = None
    stale = checkpoint_path.with_suffix(".tmp")
    if main and stale.exists():  # a write that a kill interrupted; last.pt is still the previous, complete one
        stale.unlink()
    if resume and checkpoint_path.is_file():
        checkpoint = load_checkpoint(checkpoint_path)
        conflicts = resume_conflicts(config, checkpoint["config"])
        if conflicts:
            raise ValueError(
                f"cannot resume from {checkpoint_path}: {'; '.join(conflicts)}. Resume with the interrupted run's settings "
                f"(only {', '.join(RESUME_MAY_CHANGE)} may change), or train into a new folder"
            )
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed + rank)
    vocab = training_vocab(config)
    model = build_model(config, vocab).to(device)
    model.set_train_dtype(train_dtype(config.precision, device))
    # bf16 steps use the fused AdamW kernel (same update, one pass over each tensor); fp32 keeps
    # the default implementation so that its runs stay bit-for-bit what they were
    fused = True if model.train_dtype is not None and device.type == "cpu" else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay, fused=fused)
    step, tokens_seen, position, elapsed_before = 0, 0, Position(), 0.0
    if checkpoint is not None:
        elapsed_before = float(checkpoint.get("elapsed_minutes", 0.0))
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        step, tokens_seen, position = checkpoint["step"], checkpoint["tokens"], Position(**checkpoint["position"])
        torch.set_rng_state(checkpoint["rng"]["torch"][rank] if rank < len(checkpoint["rng"]["torch"]) else torch.get_rng_state())
        cuda_states = checkpoint["rng"].get("cuda") or []
        if device.type == "cuda" and rank < len(cuda_states):
            torch.cuda.set_rng_state(cuda_states[rank], device)
    if main:
        out.mkdir(parents=True, exist_ok=True)
        srsly.write_json(out / "train_config.json", asdict(config))
        vocab.save(out / VOCAB_NAME)
    wrapped: nn.Module = model
    if world > 1:
        wrapped = nn.parallel.DistributedDataParallel(model, find_unused_parameters=False)
    if main and checkpoint is not None:
        _truncate_metrics(out / "metrics.jsonl", step)
    metrics_file = (out / "metrics.jsonl").open("a", encoding="utf-8") if main else None

    def log(record: Dict[str, Any]) -> None:
        if metrics_file is not None:
            metrics_file.write(json.dumps(record) + "\n")
            metrics_file.flush()

    def checkpoint_now() -> None:
        rng = {"torch": _gather(torch.get_rng_state(), world, device)}
        if device.type == "cuda":  # dropout on the GPU draws from the device's generator
            rng["cuda"] = _gather(torch.cuda.get_rng_state(device), world, device)
        if main:
            save_checkpoint(
                checkpoint_path,
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "tokens": tokens_seen,
                 "position": asdict(position), "config": asdict(config), "rng": rng,
                 "elapsed_minutes": (time.time() - start_time) / 60 + elapsed_before},
            )

    stream = training_batches(Path(config.data_dir), vocab, config.max_tokens, config.max_length, config.seed, position, rank, world)
    start_time, window_tokens, window_start, window_cpu = time.time(), 0, time.time(), time.process_time()
    sums = {"loss": 0.0, "nll_fwd": 0.0, "nll_bwd": 0.0, "n": 0}
    progress = tqdm(total=config.max_steps, initial=step, desc="train", unit="step", disable=not main, dynamic_ncols=True)
    model.train()
    stopped_early = False
    while step < config.max_steps:
        if config.max_minutes and (time.time() - start_time) / 60 + elapsed_before >= config.max_minutes:
            stopped_early = True
            break
        position, batch = next(stream)
        lr = lr_at(step, config, (time.time() - start_time) / 60 + elapsed_before)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.amp and device.type == "cuda"):
            loss, stats = wrapped(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip))
        optimizer.step()
        step += 1
        n = batch.n_targets * world
        tokens_seen += n
        window_tokens += n
        sums["loss"] += float(loss.detach())
        sums["nll_fwd"] += stats["nll_fwd"]
        sums["nll_bwd"] += stats["nll_bwd"]
        sums["n"] += 1
        progress.update(1)
        if step % config.log_every == 0 or step == config.max_steps:
            elapsed = time.time() - window_start
            record = {
                "step": step, "tokens": tokens_seen, "lr": lr, "grad_norm": grad_norm,
                "loss": sums["loss"] / sums["n"], "train_ppl_fwd": math.exp(sums["nll_fwd"] / sums["n"]),
                "train_ppl_bwd": math.exp(sums["nll_bwd"] / sums["n"]), "tokens_per_s": window_tokens / max(elapsed, 1e-9),
                "epoch": position.epoch, "elapsed_s": time.time() - start_time + 60 * elapsed_before,
                "tokens_per_cpu_s": window_tokens / max(time.process_time() - window_cpu, 1e-9), "precision": str(model.train_dtype or torch.float32).replace("torch.", ""),
            }
            progress.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
            log(record)
            sums = {"loss": 0.0, "nll_fwd": 0.0, "nll_bwd": 0.0, "n": 0}
            window_tokens, window_start, window_cpu = 0, time.time(), time.process_time()
        if main and (step % config.eval_every == 0):
            valid = perplexity(model, vocab, Path(config.data_dir), "valid", config.max_tokens, config.max_length, config.eval_sentences)
            log({"step": step, "tokens": tokens_seen, **{f"valid_{k}": v for k, v in valid.items()}})
            tqdm.write(f"step {step}: valid perplexity fwd {valid['ppl_fwd']:.1f} bwd {valid['ppl_bwd']:.1f}")
            window_start, window_cpu = time.time(), time.process_time()  # tokens/s counts training only
        if step % config.checkpoint_every == 0 or step == interrupt_at:
            checkpoint_now()
        if step == interrupt_at:
            progress.close()
            if metrics_file is not None:
                metrics_file.close()
            return {"step": step, "tokens": tokens_seen, "interrupted": True}
    progress.close()
    checkpoint_now()
    result: Dict[str, Any] = {"step": step, "tokens": tokens_seen, "stopped_early": stopped_early}
    if main:
        valid = perplexity(model, vocab, Path(config.data_dir), "valid", config.max_tokens, config.max_length, config.eval_sentences)
        log({"step": step, "tokens": tokens_seen, **{f"valid_{k}": v for k, v in valid.items()}})
        result.update({f"valid_{k}": v for k, v in valid.items()})
        export_model(model.cpu(), vocab, out / "model")
        plot_learning_curve(out / "metrics.jsonl", out / "learning_curve.png")
    if dump_weights is not None:
        Path(dump_weights).mkdir(parents=True, exist_ok=True)
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, Path(dump_weights) / f"rank{rank}.pt")
    if metrics_file is not None:
        metrics_file.close()
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return result


def _truncate_metrics(path: Path, step: int) -> None:
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


def plot_learning_curve(metrics_path: Path, png_path: Path, max_step: Optional[int] = None) -> Optional[Path]:
    """Training and validation perplexity against tokens seen, up to ``max_step`` if given (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        tqdm.write("matplotlib is not installed: no learning-curve plot (pip install 'spacy-elmo[train]')")
        return None
    records = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    if max_step is not None:
        records = [r for r in records if r.get("step", 0) <= max_step]
    train = [r for r in records if "train_ppl_fwd" in r]
    valid = [r for r in records if "valid_ppl_fwd" in r]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, label, rows, style in (
        ("train_ppl_fwd", "train forward (as optimised: sampled softmax when on)", train, "-"),
        ("train_ppl_bwd", "train backward (as optimised)", train, "-"),
        ("valid_ppl_fwd", "valid forward", valid, "o--"),
        ("valid_ppl_bwd", "valid backward", valid, "s--"),
    ):
        if rows:
            ax.plot([r["tokens"] / 1e6 for r in rows], [r[key] for r in rows], style, label=label, markersize=4)
    ax.set_yscale("log")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("perplexity")
    ax.set_title("biLM learning curve")
    ax.grid(True, which="both", alpha=0.3)
    if ax.lines:
        ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path
