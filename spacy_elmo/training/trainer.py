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
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Collection, Dict, List, Optional, Tuple

import numpy as np
import srsly
import torch
from torch import nn
from tqdm import tqdm

from ..bilm import BiLM, BiLMConfig, save_native
from ..bilm.transformer import TRANSFORMER_KEY, TransformerBiLM
from ..hub.load import load_bilm
from .allocator import tune_allocator
from .checkpoint import (  # noqa: F401  (re-exported: the trainer's public names before the split)
    RESUME_MAY_CHANGE,
    checkpoint_path,
    checkpoint_precision,
    gather_states,
    load_checkpoint,
    restore_optimizer,
    resume_conflicts,
    save_checkpoint,
    saved_config,
    truncate_metrics,
)
from .data import Position, Vocabulary, evaluation_batches, training_batches
from .lm import BiLMLanguageModel
from .plot import plot_learning_curve  # noqa: F401  (re-exported)
from .precision import resolve_precision, train_dtype

SOFTMAX_NAME, VOCAB_NAME = "softmax.pt", "vocab.txt"
ARCHITECTURES = ("lstm", "transformer")
CLOCKS = ("wall", "cpu")


@dataclass
class TrainConfig:
    """Everything that defines a run (saved as train_config.json)."""

    data_dir: str = ""
    out_dir: str = ""
    init_model: Optional[str] = None  # fine-tune from this biLM directory
    # the softmax vocabulary when fine-tuning: "init" = the init model's (when it has one), "corpus" =
    # the corpus's (a new domain or a bigger text): the rows of the words both share start from the
    # init model's softmax, the others from the encoder's vector of the word, every bias from the
    # corpus's unigram counts
    vocab_from: str = "init"
    # architecture (ignored when init_model is set): "lstm" (ELMo's) or "transformer" (AllenNLP's
    # transformer ELMo: n_layers pre-norm blocks per direction of width projection_dim, feed-forward
    # width lstm_dim, ``heads`` attention heads, a sinusoidal table of ``positions`` positions; the
    # clips and skip connections do not apply)
    architecture: str = "lstm"
    lstm_dim: int = 512
    projection_dim: int = 128
    n_layers: int = 2
    heads: int = 8
    positions: int = 5000
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
    # training products: fp32, bf16, or auto (bf16 only on a CPU with native bf16); None: fp32 for a new
    # run, the checkpoint's on resume (a value that differs from the checkpoint's is used, with a warning)
    precision: Optional[str] = None
    # the learning-rate schedule written out: [[from_step, horizon], ...]; from each from_step on, the
    # cosine decay runs to step ``horizon`` (a warm restart where the horizon moves out, a steeper
    # decay where it moves in). Empty: ``max_steps`` throughout. See :func:`horizon_at`.
    lr_horizons: List[List[int]] = field(default_factory=list)
    # a safety cap on wall time (0 = none): the run stops there (checkpoint and export, resumable)
    # without changing its schedule, and its result says so (``stopped_by``)
    time_cap_minutes: float = 0.0
    # what max_minutes, time_cap_minutes and the schedule's time count: "wall" (wall-clock minutes) or
    # "cpu" (this process's CPU minutes: the same budget for runs that share a machine, as a pilot's arms)
    clock: str = "wall"
    # keep freed large buffers in the heap between steps (glibc only; see training/allocator.py);
    # SPACY_ELMO_MALLOC_TUNING=0 also switches it off
    malloc_tuning: bool = True
    # the spaCy language code of the text (what ``prepare --lang`` tokenised it with): a record, checked
    # against the prepared folder's stats.json by the command line
    lang: str = "en"

    def __post_init__(self) -> None:
        check_horizons(self.lr_horizons, self.warmup_steps)
        if self.vocab_from not in ("init", "corpus"):
            raise ValueError(f"vocab_from must be 'init' or 'corpus', got {self.vocab_from!r}")
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {self.clock!r}")
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be one of {', '.join(ARCHITECTURES)}, got {self.architecture!r}")
        if self.architecture == "transformer" and self.init_model is None:
            if self.heads < 1 or self.projection_dim % self.heads:
                raise ValueError(
                    f"a transformer's width (projection_dim {self.projection_dim}) must be a multiple of its {self.heads} heads"
                )
            if self.positions < self.max_length + 2:
                raise ValueError(f"positions {self.positions} cannot hold a sentence of max_length {self.max_length} and its two markers")


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
        return BiLMLanguageModel(new_bilm(config), len(vocab), dropout=config.dropout, n_samples=config.n_samples)
    bilm = load_bilm(config.init_model)
    model = BiLMLanguageModel(bilm, len(vocab), dropout=config.dropout, n_samples=config.n_samples)
    softmax = Path(config.init_model) / SOFTMAX_NAME
    init_vocab = Path(config.init_model) / VOCAB_NAME
    if config.vocab_from == "corpus" or not softmax.is_file():
        model.init_softmax_from_encoder(vocab.tokens, vocab.counts)
    if softmax.is_file() and config.vocab_from == "corpus" and init_vocab.is_file():
        state = torch.load(softmax, map_location="cpu", weights_only=True)
        copied = copy_softmax_rows(model, state["weight"], Vocabulary.load(init_vocab), vocab)
        print(f"softmax: {copied:,} of {len(vocab):,} rows from the init model's, the rest from the encoder")
    elif softmax.is_file():
        model.softmax.load_state_dict(torch.load(softmax, map_location="cpu", weights_only=True))
    return model


def new_bilm(config: TrainConfig) -> BiLM:
    """A fresh biLM of ``config``'s architecture (an LSTM biLM, or a :class:`TransformerBiLM`)."""
    char_cnn: Dict[str, Any] = dict(
        char_dim=config.char_dim, filters=tuple((int(w), int(n)) for w, n in config.filters), n_highway=config.n_highway
    )
    if config.architecture == "transformer":
        section = {"heads": config.heads, "positions": config.positions, "token_layer_norm": True}
        shape = BiLMConfig(
            lstm_dim=config.lstm_dim,
            projection_dim=config.projection_dim,
            n_layers=config.n_layers,
            cell_clip=None,
            proj_clip=None,
            use_skip_connections=False,
            extra={TRANSFORMER_KEY: section},
            **char_cnn,
        )
        model = TransformerBiLM(shape)
        model.transformer.init_for_training()
        return model
    return BiLM(
        BiLMConfig(
            lstm_dim=config.lstm_dim,
            projection_dim=config.projection_dim,
            n_layers=config.n_layers,
            cell_clip=config.cell_clip or None,
            proj_clip=config.proj_clip or None,
            use_skip_connections=config.use_skip_connections,
            **char_cnn,
        )
    )


@torch.no_grad()
def copy_softmax_rows(model: BiLMLanguageModel, weight: torch.Tensor, old: Vocabulary, new: Vocabulary) -> int:
    """Copy the output vectors of the words ``old`` and ``new`` share into ``model``'s softmax (over
    ``new``); returns how many. The biases stay as they are (the new corpus's unigram counts)."""
    if weight.shape != (len(old), model.softmax.in_features):
        raise ValueError(f"init softmax has shape {tuple(weight.shape)}, expected ({len(old)}, {model.softmax.in_features})")
    pairs = [(i, old.index[token]) for i, token in enumerate(new.tokens) if token in old.index]
    if pairs:
        rows = torch.tensor([i for i, _ in pairs])
        model.softmax.weight[rows] = weight[torch.tensor([j for _, j in pairs])].to(model.softmax.weight.dtype)
    return len(pairs)


def training_vocab(config: TrainConfig) -> Vocabulary:
    """The init model's vocabulary when it has one (kept when fine-tuning, unless ``vocab_from`` is
    ``"corpus"``), else the corpus's."""
    if config.init_model is not None and config.vocab_from == "init" and (Path(config.init_model) / VOCAB_NAME).is_file():
        return Vocabulary.load(Path(config.init_model) / VOCAB_NAME)
    return Vocabulary.load(Path(config.data_dir) / VOCAB_NAME)


def check_horizons(horizons: List[List[int]], warmup_steps: int) -> None:
    """``lr_horizons`` must be ``[from_step, horizon]`` pairs, from_steps rising, horizons past the warm-up."""
    previous = -1
    for pair in horizons:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(v, int) and v >= 0 for v in pair)):
            raise ValueError(f"lr_horizons: each entry must be [from_step, horizon] (whole numbers >= 0), got {pair!r}")
        if pair[0] <= previous:
            raise ValueError(f"lr_horizons: from_steps must rise, got {pair[0]} after {previous}")
        if pair[1] <= warmup_steps:
            raise ValueError(f"lr_horizons: horizon {pair[1]} must be past the warm-up ({warmup_steps} steps)")
        previous = pair[0]


def horizon_at(step: int, config: TrainConfig) -> int:
    """The step the cosine decay ends at, as seen from ``step``: the last ``lr_horizons`` entry whose
    from_step is at or before it, else ``max_steps``."""
    horizon = config.max_steps
    for start, end in config.lr_horizons:
        if start > step:
            break
        horizon = end
    return horizon


def lr_at(step: int, config: TrainConfig, elapsed_minutes: float = 0.0) -> float:
    """Linear warm-up, then cosine decay to 10% of ``lr`` at the horizon (``max_steps``, or the
    ``lr_horizons`` entry in force at ``step``).

    With a time budget (``max_minutes``) the decay follows whichever runs out first, steps or
    time, so a budgeted run still ends at the low learning rate (such runs are not bit-for-bit
    reproducible, since their schedule depends on the machine's speed).
    """
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    horizon = horizon_at(step, config)
    progress = min(1.0, (step - config.warmup_steps) / max(1, horizon - config.warmup_steps))
    if config.max_minutes:
        progress = max(progress, min(1.0, elapsed_minutes / config.max_minutes))
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


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
def perplexities(
    model: BiLMLanguageModel,
    vocab: Vocabulary,
    data_dir: Path,
    split: str,
    max_tokens: int = 4096,
    max_length: int = 50,
    limit: int = 0,
    common_words: Optional[Collection[str]] = None,
) -> Tuple[Dict[str, float], Optional[Dict[str, float]]]:
    """Exact (full-softmax) held-out perplexity (forward, backward and their mean) and, with
    ``common_words``, the same over the events "each word of ``common_words`` that ``vocab``
    holds" plus one "any other word" (``common_types`` counts the former), from one pass: models
    with different vocabularies compare on the same events when each gets the words both hold."""
    common = None
    if common_words is not None:
        wanted = set(common_words)
        common = torch.tensor([token in wanted for token in vocab.tokens], dtype=torch.bool)
        common[Vocabulary.UNK] = False  # "a word the vocabulary lacks" is always the other event
    was_training = model.training
    model.eval()
    sums = [0.0, 0.0, 0.0, 0.0]  # forward, backward, and both over the common events
    count = 0
    for batch in evaluation_batches(Path(data_dir), split, vocab, max_tokens, max_length, limit):
        full, collapsed, n = model.nll(batch, common)
        for i, value in enumerate((*full, *(collapsed or (0.0, 0.0)))):
            sums[i] += value
        count += n
    model.train(was_training)
    if count == 0:
        raise ValueError(f"no {split} sentences in {data_dir}")

    def figures(fwd: float, bwd: float) -> Dict[str, float]:
        ppl_f, ppl_b = math.exp(fwd / count), math.exp(bwd / count)
        return {"ppl_fwd": ppl_f, "ppl_bwd": ppl_b, "ppl_avg": (ppl_f + ppl_b) / 2, "tokens": count}

    if common is None:
        return figures(sums[0], sums[1]), None
    return figures(sums[0], sums[1]), {**figures(sums[2], sums[3]), "common_types": int(common.sum())}


def perplexity(model: BiLMLanguageModel, vocab: Vocabulary, data_dir: Path, split: str, **options: Any) -> Dict[str, float]:
    """:func:`perplexities`' full-vocabulary figures, or with ``common_words`` its common-event ones
    (``options``: :func:`perplexities`' keyword arguments)."""
    full, common = perplexities(model, vocab, data_dir, split, **options)
    return full if common is None else common


@dataclass
class _Run:
    """What the loop carries from step to step (and what a checkpoint restores)."""

    step: int = 0
    tokens: int = 0
    position: Position = field(default_factory=Position)
    minutes_before: float = 0.0  # trained by the runs this one resumes
    start_time: float = 0.0
    clock: str = "wall"  # TrainConfig.clock

    def now(self) -> float:
        """Seconds on the run's clock: wall time, or this process's CPU time."""
        return time.process_time() if self.clock == "cpu" else time.time()

    def minutes(self) -> float:
        """Training minutes so far on the run's clock, the resumed runs' included."""
        return (self.now() - self.start_time) / 60 + self.minutes_before


@dataclass
class _Window:
    """Training statistics between two log records (tokens/s counts training only)."""

    tokens: int = 0
    loss: float = 0.0
    nll_fwd: float = 0.0
    nll_bwd: float = 0.0
    n: int = 0
    start: float = field(default_factory=time.time)
    cpu_start: float = field(default_factory=time.process_time)

    def restart_clock(self) -> None:
        self.start, self.cpu_start = time.time(), time.process_time()


def train(
    config: TrainConfig, resume: bool = False, dump_weights: Optional[Path] = None, interrupt_at: Optional[int] = None
) -> Dict[str, Any]:
    """Run (or resume) a training job; returns the final metrics.

    ``interrupt_at``: stop right after that step as an interrupted run would (checkpoint, no
    export), so that ``resume=True`` can continue it.
    """
    # setup: ranks, device, the checkpoint to resume, seeds, model and optimizer
    rank, world = _distributed()
    main = rank == 0
    out = Path(config.out_dir)
    if config.threads:
        torch.set_num_threads(config.threads)
    tune_allocator(config.malloc_tuning)
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu")
    checkpoint = _checkpoint_to_resume(config, out, resume, main)
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed + rank)
    vocab = training_vocab(config)
    model = build_model(config, vocab).to(device)
    precision = _run_precision(config, checkpoint, device, main)
    model.set_train_dtype(train_dtype(precision, device))
    optimizer = _optimizer(config, model, device)

    # resume: weights, optimizer, counters, data position and RNG as the checkpoint left them
    run = _Run()
    if checkpoint is not None:
        _restore(checkpoint, model, optimizer, run, rank, device)
    if main:
        out.mkdir(parents=True, exist_ok=True)
        srsly.write_json(out / "train_config.json", asdict(config))
        vocab.save(out / VOCAB_NAME)
    wrapped: nn.Module = model
    if world > 1:
        wrapped = nn.parallel.DistributedDataParallel(model, find_unused_parameters=False)
    if main and checkpoint is not None:
        truncate_metrics(out / "metrics.jsonl", run.step)
    metrics_file = (out / "metrics.jsonl").open("a", encoding="utf-8") if main else None

    def log(record: Dict[str, Any]) -> None:
        if metrics_file is not None:
            metrics_file.write(json.dumps(record) + "\n")
            metrics_file.flush()

    def evaluate() -> Dict[str, float]:
        valid = perplexity(
            model,
            vocab,
            Path(config.data_dir),
            "valid",
            max_tokens=config.max_tokens,
            max_length=config.max_length,
            limit=config.eval_sentences,
        )
        log({"step": run.step, "tokens": run.tokens, "clock_minutes": run.minutes(), **{f"valid_{k}": v for k, v in valid.items()}})
        return valid

    def save() -> None:
        _save(checkpoint_path(out), config, model, optimizer, run, world, device, main)

    stream = training_batches(Path(config.data_dir), vocab, config.max_tokens, config.max_length, config.seed, run.position, rank, world)
    run.clock = config.clock
    run.start_time = run.now()
    window = _Window()
    progress = tqdm(total=config.max_steps, initial=run.step, desc="train", unit="step", disable=not main, dynamic_ncols=True)
    model.train()
    stopped_early = False
    stopped_by: Optional[str] = None
    while run.step < config.max_steps:
        minutes = _agreed_minutes(run, config, world, device)
        if config.max_minutes and minutes >= config.max_minutes:
            stopped_early = True
            break
        if config.time_cap_minutes and minutes >= config.time_cap_minutes:
            stopped_early, stopped_by = True, "time_cap_minutes"
            break
        # step: one batch, one optimizer update
        run.position, batch = next(stream)
        lr = lr_at(run.step, config, minutes)
        loss, stats, grad_norm = _step(config, wrapped, model, optimizer, batch, lr, device)
        run.step += 1
        n = batch.n_targets * world
        run.tokens += n
        window.tokens += n
        window.loss += float(loss.detach())
        window.nll_fwd += stats["nll_fwd"]
        window.nll_bwd += stats["nll_bwd"]
        window.n += 1
        progress.update(1)
        # log: the window's means every log_every steps
        if run.step % config.log_every == 0 or run.step == config.max_steps:
            record = _log_record(run, window, lr, grad_norm, model)
            progress.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
            log(record)
            window = _Window()
        # evaluate: held-out perplexity (rank 0), outside the tokens/s clock
        if main and (run.step % config.eval_every == 0):
            valid = evaluate()
            tqdm.write(f"step {run.step}: valid perplexity fwd {valid['ppl_fwd']:.1f} bwd {valid['ppl_bwd']:.1f}")
            window.restart_clock()
        # checkpoint: atomically, every checkpoint_every steps (and where a test interrupts the run)
        if run.step % config.checkpoint_every == 0 or run.step == interrupt_at:
            save()
        if run.step == interrupt_at:
            progress.close()
            if metrics_file is not None:
                metrics_file.close()
            return {"step": run.step, "tokens": run.tokens, "interrupted": True}

    # finish: last checkpoint, final evaluation, export and plot
    progress.close()
    save()
    result: Dict[str, Any] = {"step": run.step, "tokens": run.tokens, "stopped_early": stopped_early}
    if stopped_early:
        result["stopped_by"] = stopped_by or "max_minutes"
    if main:
        result.update({f"valid_{k}": v for k, v in evaluate().items()})
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


def _agreed_minutes(run: _Run, config: TrainConfig, world: int, device: torch.device) -> float:
    """The run's training minutes, as rank 0 counts them.

    With a time budget the clock sets the learning rate and the stop, so every rank must read the
    same value: otherwise replicas apply different learning rates and drift apart, or one rank stops
    while the others wait for it in the next all-reduce.
    """
    minutes = run.minutes()
    if world > 1 and (config.max_minutes or config.time_cap_minutes):
        shared = torch.tensor([minutes], dtype=torch.float64, device=device)
        torch.distributed.broadcast(shared, src=0)
        minutes = float(shared.item())
    return minutes


def _checkpoint_to_resume(config: TrainConfig, out: Path, resume: bool, main: bool) -> Optional[Dict[str, Any]]:
    """The checkpoint a resumed run continues (None when there is none), checked against ``config``."""
    path = checkpoint_path(out)
    stale = path.with_suffix(".tmp")
    if main and stale.exists():  # a write that a kill interrupted; last.pt is still the previous, complete one
        stale.unlink()
    if not (resume and path.is_file()):
        return None
    checkpoint = load_checkpoint(path)
    conflicts = resume_conflicts(config, checkpoint["config"])
    if conflicts:
        raise ValueError(
            f"cannot resume from {path}: {'; '.join(conflicts)}. Resume with the interrupted run's settings "
            f"(only {', '.join(RESUME_MAY_CHANGE)} may change), or train into a new folder"
        )
    return checkpoint


def _run_precision(config: TrainConfig, checkpoint: Optional[Dict[str, Any]], device: torch.device, main: bool) -> str:
    """``fp32`` or ``bf16`` for this run: ``config.precision`` (default fp32) for a new run; on
    resume the checkpoint's, unless ``config.precision`` asks for another (then a warning names both)."""
    if checkpoint is None:
        return resolve_precision(config.precision or "fp32", device)
    saved = checkpoint_precision(checkpoint, device)
    if config.precision is None:
        return saved
    chosen = resolve_precision(config.precision, device)
    if chosen != saved and main:
        warnings.warn(
            f"resuming a run trained in {saved} with precision {chosen} (precision={config.precision!r} on {device.type}); "
            f"leave precision unset to keep {saved}",
            UserWarning,
            stacklevel=3,
        )
    return chosen


def _precision_name(dtype: Optional[torch.dtype]) -> str:
    """What a checkpoint records for a model training with kernels of ``dtype`` (None: plain fp32)."""
    return {torch.bfloat16: "bf16", torch.float32: "fp32-fused"}.get(dtype, "fp32") if dtype else "fp32"


def _optimizer(config: TrainConfig, model: BiLMLanguageModel, device: torch.device) -> torch.optim.Optimizer:
    """AdamW; bf16 steps use the fused kernel (same update, one pass over each tensor), while fp32
    keeps the default implementation so that its runs stay bit-for-bit what they were."""
    fused = True if model.train_dtype is not None and device.type == "cpu" else None
    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay, fused=fused)


def _restore(
    checkpoint: Dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer, run: _Run, rank: int, device: torch.device
) -> None:
    run.minutes_before = float(checkpoint.get("elapsed_minutes", 0.0))
    model.load_state_dict(checkpoint["model"])
    restore_optimizer(optimizer, checkpoint["optimizer"])  # the state; the settings (fused, ...) stay this run's
    run.step, run.tokens, run.position = checkpoint["step"], checkpoint["tokens"], Position(**checkpoint["position"])
    torch.set_rng_state(checkpoint["rng"]["torch"][rank] if rank < len(checkpoint["rng"]["torch"]) else torch.get_rng_state())
    cuda_states = checkpoint["rng"].get("cuda") or []
    if device.type == "cuda" and rank < len(cuda_states):
        torch.cuda.set_rng_state(cuda_states[rank], device)


def _step(
    config: TrainConfig, wrapped: nn.Module, model: nn.Module, optimizer: torch.optim.Optimizer, batch: Any, lr: float, device: torch.device
) -> Tuple[torch.Tensor, Dict[str, float], float]:
    """Forward, backward, clip and update at learning rate ``lr``: (loss, statistics, gradient norm)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.amp and device.type == "cuda"):
        loss, stats = wrapped(batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip))
    optimizer.step()
    return loss, stats, grad_norm


def _log_record(run: _Run, window: _Window, lr: float, grad_norm: float, model: BiLMLanguageModel) -> Dict[str, Any]:
    elapsed = time.time() - window.start
    return {
        "step": run.step,
        "tokens": run.tokens,
        "lr": lr,
        "grad_norm": grad_norm,
        "loss": window.loss / window.n,
        "train_ppl_fwd": math.exp(window.nll_fwd / window.n),
        "train_ppl_bwd": math.exp(window.nll_bwd / window.n),
        "tokens_per_s": window.tokens / max(elapsed, 1e-9),
        "epoch": run.position.epoch,
        "elapsed_s": 60 * run.minutes(),  # on the run's clock (wall, or CPU with clock "cpu")
        "clock": run.clock,
        "tokens_per_cpu_s": window.tokens / max(time.process_time() - window.cpu_start, 1e-9),
        "precision": {torch.bfloat16: "bfloat16", torch.float32: "float32-fused"}.get(model.train_dtype, "float32")
        if model.train_dtype
        else "float32",
    }


def _save(
    path: Path,
    config: TrainConfig,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    run: _Run,
    world: int,
    device: torch.device,
    main: bool,
) -> None:
    """Gather every rank's RNG state; rank 0 writes the checkpoint."""
    rng = {"torch": gather_states(torch.get_rng_state(), world, device)}
    if device.type == "cuda":  # dropout on the GPU draws from the device's generator
        rng["cuda"] = gather_states(torch.cuda.get_rng_state(device), world, device)
    if main:
        save_checkpoint(
            path,
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "step": run.step,
                "tokens": run.tokens,
                "position": asdict(run.position),
                "config": asdict(config),
                "rng": rng,
                "elapsed_minutes": run.minutes(),
                "precision": _precision_name(getattr(model, "train_dtype", None)),
            },
        )
