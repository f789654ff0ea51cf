"""Refit a trained LM's output bias to the full softmax's likelihood condition.

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

Whether it lowers held-out perplexity is measured, not promised (``refit.json`` records the
predicted mass's distance from its target before each step).
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List

import torch

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

    def __post_init__(self) -> None:
        if self.sentences < 1 or self.iterations < 1 or self.chunk < 1:
            raise ValueError(f"sentences, iterations and chunk must be 1 or more, got {self.sentences}, {self.iterations}, {self.chunk}")
        if not 0 < self.damping <= 1 or self.max_step <= 0:
            raise ValueError(f"damping must be in (0, 1] and max_step above 0, got {self.damping} and {self.max_step}")


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
def context_states(
    lm: BiLMLanguageModel, vocab: Vocabulary, data_dir: Path, settings: RefitSettings, progress: bool = False
) -> torch.Tensor:
    """The top-layer states from which the LM predicts a word (forward and backward), over the
    first ``settings.sentences`` training sentences."""
    lm.eval()
    states: List[torch.Tensor] = []
    bar = progress_bar(desc="refit-bias: states", unit="sentences", disable=not progress)
    for batch in evaluation_batches(Path(data_dir), "train", vocab, settings.max_tokens, settings.max_length, settings.sentences):
        fwd_h, _, bwd_h, _ = lm.hidden_and_targets(batch)
        states += [fwd_h.float(), bwd_h.float()]
        bar.update(int(batch.word_ids.shape[0]))
    bar.close()
    if not states:
        raise ValueError(f"no training sentences in {data_dir}: the bias is refit on the corpus the LM was trained on")
    return torch.cat(states)


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


def refit_model(
    model: Path, data_dir: Path, out: Path, settings: RefitSettings = RefitSettings(), progress: bool = False
) -> Dict[str, Any]:
    """Write ``model`` (a run folder or model folder) with its bias refit on ``data_dir``'s training
    split to ``out`` (replaced whole when complete); returns what ``refit.json`` records."""
    folder = model_folder(Path(model))
    lm, vocab = load_language_model(folder)
    data_vocab = Vocabulary.load(Path(data_dir) / "vocab.txt")
    if data_vocab.tokens != vocab.tokens:
        raise ValueError(f"{data_dir}'s vocabulary is not {model}'s: refit the bias on the corpus the model was trained on")
    states = context_states(lm, data_vocab, Path(data_dir), settings, progress)
    history = refit_bias(lm, data_vocab, states, settings, progress)
    if not bool(torch.isfinite(lm.softmax.bias).all()):
        raise ValueError("the refit bias is not finite: nothing written")

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
            "weights_sha256": file_sha256(staging / "weights.pt"),
        }
        write_json(staging / REFIT_NAME, record, indent=1)
        return record

    return replace_folder(out, write)
