"""Refit a trained LM's output layer to the full softmax: its bias always, its output vectors on request.

Training samples the softmax (``n_samples`` candidates a step, log-uniform over frequency-ranked
ids, with the expected-count correction), which estimates the full softmax's gradient for the
output vectors well and leaves the per-word bias off the full softmax's optimum. With everything
else fixed the log-likelihood is concave in the bias, and at its maximum each word's predicted
mass over the training contexts equals its count: ``sum_c p(w | c) = count(w)``. This module
collects the top-layer states of the first ``sentences`` training sentences (both directions, as
the LM predicts), takes each word's count from the corpus vocabulary (``prepare``'s counts over
the whole training split), and moves the bias toward that condition by damped iterative scaling,
``b_w += damping * clip(log(target_w / mass_w), -max_step, max_step)``. Only ``softmax.pt``'s bias
changes: the biLM's files are copied as they are, so every ELMo vector stays as it was; the LM's
predictions (perplexity, `induce`'s substitutes) move. ::

    python -m spacy_elmo refit-bias training/leg --data corpus/mixed-v2 --out training/leg-refit

With ``rows=True`` (``refit-bias --rows``) the output vectors move too, after the bias: Adam on the
full softmax's cross-entropy over the states of the first ``row_sentences`` training sentences
(``row_epochs`` passes in shuffled batches of ``row_batch``), the corpus's validation sentences
read ``checks`` times along the way, and the output layer of the best read kept (the start
included, so held-out perplexity never rises). The ELMo vectors stay as they were; `induce`'s
context vectors, read from the output vectors, move with them.

Whether either lowers held-out perplexity is measured, not promised (``refit.json`` records the
predicted mass's distance from its target before each step and, with the rows, each validation read).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Tuple

import torch
import torch.nn.functional as F

from ..bilm.weights import file_sha256
from ..files import replace_folder, write_json
from ..progress import progress_bar
from .data import Vocabulary, evaluation_batches
from .lm import BiLMLanguageModel
from .ship import model_folder
from .trainer import SOFTMAX_NAME, load_language_model

REFIT_NAME = "refit.json"


@dataclass
class RefitSettings:
    """How the bias is refit: training ``sentences`` read (in ``evaluate``'s fixed order),
    ``iterations`` of damped scaling, each word's step at most ``max_step`` nats times ``damping``."""

    sentences: int = 4000
    iterations: int = 4
    damping: float = 0.5
    max_step: float = 1.0
    max_tokens: int = 4096
    max_length: int = 50
    chunk: int = 2048  # contexts per full-softmax product (memory: chunk x vocabulary floats)
    rows: bool = False  # also fit the output vectors (after the bias), early-stopped on the valid split
    row_sentences: int = 12000
    row_epochs: float = 0.5
    row_lr: float = 3e-4
    row_batch: int = 4096
    valid_sentences: int = 1000
    checks: int = 12
    seed: int = 0

    def __post_init__(self) -> None:
        if self.sentences < 1 or self.iterations < 1 or self.chunk < 1:
            raise ValueError(f"sentences, iterations and chunk must be 1 or more, got {self.sentences}, {self.iterations}, {self.chunk}")
        if not 0 < self.damping <= 1 or self.max_step <= 0:
            raise ValueError(f"damping must be in (0, 1] and max_step above 0, got {self.damping} and {self.max_step}")
        if self.row_sentences < 1 or self.row_batch < 1 or self.valid_sentences < 1 or self.checks < 1:
            raise ValueError(
                f"row_sentences, row_batch, valid_sentences and checks must be 1 or more, got {self.row_sentences}, "
                f"{self.row_batch}, {self.valid_sentences}, {self.checks}"
            )
        if not self.row_epochs > 0 or not self.row_lr > 0:
            raise ValueError(f"row_epochs and row_lr must be above 0, got {self.row_epochs} and {self.row_lr}")


def target_shares(vocab: Vocabulary) -> torch.Tensor:
    """Each id's share of the LM's predictions over both directions: a word is predicted once by each
    direction, the sentence end only forward and the sentence start only backward."""
    counts = torch.tensor(vocab.counts, dtype=torch.float64)
    if counts.sum() <= 0:
        raise ValueError("the vocabulary records no counts: refit the bias with the vocab.txt of `prepare` (token<TAB>count)")
    target = 2.0 * counts
    target[Vocabulary.BOS] = counts[Vocabulary.BOS]
    target[Vocabulary.EOS] = counts[Vocabulary.EOS]
    return target / target.sum()


@torch.no_grad()
def context_examples(
    lm: BiLMLanguageModel, vocab: Vocabulary, data_dir: Path, split: str, sentences: int, settings: RefitSettings, progress: bool = False
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The top-layer states from which the LM predicts a word (forward and backward) over the first
    ``sentences`` sentences of ``split``, and the ids of the words they predict."""
    lm.eval()
    states: List[torch.Tensor] = []
    targets: List[torch.Tensor] = []
    bar = progress_bar(desc=f"refit: {split} states", unit="sentences", disable=not progress)
    for batch in evaluation_batches(Path(data_dir), split, vocab, settings.max_tokens, settings.max_length, sentences):
        fwd_h, fwd_y, bwd_h, bwd_y = lm.hidden_and_targets(batch)
        states += [fwd_h.float(), bwd_h.float()]
        targets += [fwd_y, bwd_y]
        bar.update(int(batch.word_ids.shape[0]))
    bar.close()
    if not states:
        raise ValueError(f"no {split} sentences in {data_dir}: the output layer is refit on the corpus the LM was trained on")
    return torch.cat(states), torch.cat(targets)


def context_states(
    lm: BiLMLanguageModel, vocab: Vocabulary, data_dir: Path, settings: RefitSettings, progress: bool = False
) -> torch.Tensor:
    """The top-layer states from which the LM predicts a word (forward and backward), over the
    first ``settings.sentences`` training sentences."""
    return context_examples(lm, vocab, data_dir, "train", settings.sentences, settings, progress)[0]


@torch.no_grad()
def predicted_mass(lm: BiLMLanguageModel, states: torch.Tensor, chunk: int) -> torch.Tensor:
    """Each id's summed full-softmax probability over ``states`` (float64)."""
    weight, bias = lm.softmax.weight.float(), lm.softmax.bias.float()
    mass = torch.zeros(weight.shape[0], dtype=torch.float64)
    for start in range(0, len(states), chunk):
        mass += torch.softmax(states[start : start + chunk] @ weight.t() + bias, dim=-1).sum(0).double()
    return mass


@torch.no_grad()
def refit_bias(
    lm: BiLMLanguageModel, vocab: Vocabulary, states: torch.Tensor, settings: RefitSettings, progress: bool = False
) -> List[Dict[str, float]]:
    """Move ``lm``'s softmax bias in place toward ``sum_c p(w | c) = count(w)`` over ``states``; per
    iteration, the mean absolute log ratio of target to predicted mass before its step (over all
    ids and over the 1,000 most frequent)."""
    target = target_shares(vocab) * len(states)
    floor = 1e-3  # a target below a thousandth of an occurrence counts as that (words never seen)
    history = []
    for _ in progress_bar(range(settings.iterations), desc="refit-bias: steps", unit="steps", disable=not progress):
        log_ratio = torch.log(target.clamp_min(floor) / predicted_mass(lm, states, settings.chunk).clamp_min(1e-12))
        history.append(
            {"mean_abs_log_ratio": float(log_ratio.abs().mean()), "top1000_mean_abs_log_ratio": float(log_ratio[:1000].abs().mean())}
        )
        step = settings.damping * log_ratio.clamp(-settings.max_step, settings.max_step)
        lm.softmax.bias.add_(step.to(lm.softmax.bias.dtype))
    return history


@torch.no_grad()
def mean_nll(weight: torch.Tensor, bias: torch.Tensor, states: torch.Tensor, targets: torch.Tensor, chunk: int) -> float:
    """The full softmax's mean negative log-likelihood of ``targets`` given ``states``."""
    total = 0.0
    for start in range(0, len(states), chunk):
        logits = states[start : start + chunk] @ weight.t() + bias
        total += float(F.cross_entropy(logits, targets[start : start + chunk], reduction="sum"))
    return total / max(len(targets), 1)


def refit_rows(
    lm: BiLMLanguageModel,
    examples: Tuple[torch.Tensor, torch.Tensor],
    valid: Tuple[torch.Tensor, torch.Tensor],
    settings: RefitSettings,
    progress: bool = False,
) -> List[Dict[str, float]]:
    """Fit ``lm``'s output vectors and bias in place to the full softmax over ``examples`` (states,
    target ids), keeping the read of ``valid`` with the lowest perplexity (the start among them);
    returns each read: step, contexts seen, validation perplexity."""
    states, targets = examples
    weight = lm.softmax.weight.detach().float().clone().requires_grad_(True)
    bias = lm.softmax.bias.detach().float().clone().requires_grad_(True)
    optimizer = torch.optim.Adam([weight, bias], lr=settings.row_lr)
    steps = max(1, round(settings.row_epochs * len(states) / settings.row_batch))
    every = max(1, steps // settings.checks)
    generator = torch.Generator().manual_seed(settings.seed)
    order = torch.randperm(len(states), generator=generator)

    def read(step: int) -> Dict[str, float]:
        ppl = math.exp(mean_nll(weight.detach(), bias.detach(), valid[0], valid[1], settings.chunk))
        return {"step": step, "contexts": step * settings.row_batch, "valid_ppl": ppl}

    history = [read(0)]
    best = (history[0]["valid_ppl"], weight.detach().clone(), bias.detach().clone())
    position = 0
    for step in progress_bar(range(1, steps + 1), desc="refit: output vectors", unit="steps", disable=not progress):
        if position + settings.row_batch > len(order):  # a new pass, in a new order
            order, position = torch.randperm(len(states), generator=generator), 0
        chosen = order[position : position + settings.row_batch]
        position += settings.row_batch
        loss = F.cross_entropy(states[chosen] @ weight.t() + bias, targets[chosen])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % every == 0 or step == steps:
            history.append(read(step))
            if history[-1]["valid_ppl"] < best[0]:
                best = (history[-1]["valid_ppl"], weight.detach().clone(), bias.detach().clone())
    with torch.no_grad():
        lm.softmax.weight.copy_(best[1].to(lm.softmax.weight.dtype))
        lm.softmax.bias.copy_(best[2].to(lm.softmax.bias.dtype))
    return history


def _validation(
    lm: BiLMLanguageModel, vocab: Vocabulary, data_dir: Path, settings: RefitSettings, progress: bool
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The validation examples that pick the rows' step, or one error that says what is missing."""
    try:
        return context_examples(lm, vocab, data_dir, "valid", settings.valid_sentences, settings, progress)
    except (FileNotFoundError, ValueError):
        raise ValueError(
            f"no valid sentences in {data_dir}: fitting the output vectors keeps its best step on held-out text "
            "(prepare the corpus with valid files in its manifest.tsv, or --held-out above 0)"
        ) from None


def refit_model(
    model: Path, data_dir: Path, out: Path, settings: RefitSettings = RefitSettings(), progress: bool = False
) -> Dict[str, Any]:
    """Write ``model`` (a run folder or model folder) with its bias (and, with ``settings.rows``, its
    output vectors) refit on ``data_dir``'s training split to ``out`` (replaced whole when
    complete); returns what ``refit.json`` records."""
    folder = model_folder(Path(model))
    lm, vocab = load_language_model(folder)
    data_vocab = Vocabulary.load(Path(data_dir) / "vocab.txt")
    if data_vocab.tokens != vocab.tokens:
        raise ValueError(f"{data_dir}'s vocabulary is not {model}'s: refit the bias on the corpus the model was trained on")
    # the valid sentences first: a corpus without them is refused before any work
    valid = _validation(lm, data_vocab, Path(data_dir), settings, progress) if settings.rows else None
    states = context_states(lm, data_vocab, Path(data_dir), settings, progress)
    history = refit_bias(lm, data_vocab, states, settings, progress)
    rows: Dict[str, Any] = {}
    if valid is not None:
        examples = context_examples(lm, data_vocab, Path(data_dir), "train", settings.row_sentences, settings, progress)
        reads = refit_rows(lm, examples, valid, settings, progress)
        rows = {"rows": {"contexts": int(examples[0].shape[0]), "valid_contexts": int(valid[0].shape[0]), "reads": reads}}
    if not bool(torch.isfinite(lm.softmax.bias).all() and torch.isfinite(lm.softmax.weight).all()):
        raise ValueError("the refit softmax is not finite: nothing written")

    def write(staging: Path) -> Dict[str, Any]:
        for path in folder.iterdir():  # the biLM's files as they are (its digest unchanged); records of the input left behind
            if path.is_file() and path.name not in (SOFTMAX_NAME, REFIT_NAME, "soup.json", "valid.json"):
                shutil.copyfile(path, staging / path.name)
        torch.save({k: v.detach().cpu() for k, v in lm.softmax.state_dict().items()}, staging / SOFTMAX_NAME)
        record: Dict[str, Any] = {
            "input": {"path": str(model), "weights_sha256": file_sha256(folder / "weights.pt")},
            "data": str(data_dir),
            "contexts": len(states),
            "settings": asdict(settings),
            "history": history,
            **rows,
            "weights_sha256": file_sha256(staging / "weights.pt"),
        }
        write_json(staging / REFIT_NAME, record, indent=1)
        return record

    return replace_folder(out, write)
