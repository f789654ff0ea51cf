"""The biLM language-modelling objective: a softmax shared by both directions.

The forward LM's top layer at position k predicts token k+1, the backward LM's predicts token
k-1; the loss is the sum of both mean negative log likelihoods. Training can use a sampled
softmax (log-uniform candidates, as bilm-tf) for large vocabularies; :meth:`nll` always
normalises over the full vocabulary, so reported perplexities are exact.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from ..bilm import BiLM
from .data import LMBatch
from .sampled_softmax import SampledSoftmaxLoss


class BiLMLanguageModel(nn.Module):
    """A :class:`BiLM` plus the shared softmax over a word vocabulary."""

    def __init__(self, bilm: BiLM, vocab_size: int, dropout: float = 0.1, n_samples: int = 0) -> None:
        super().__init__()
        self.bilm = bilm
        contextualizer(bilm)  # refuses a biLM training cannot steer
        self.softmax = nn.Linear(bilm.config.projection_dim, vocab_size)
        self.dropout = dropout
        self.n_samples = n_samples
        setattr(self.context, "dropout", dropout)  # an LSTM stack's attribute, a transformer's property
        self.train_dtype: Optional[torch.dtype] = None
        nn.init.normal_(self.softmax.weight, std=1.0 / math.sqrt(bilm.config.projection_dim))
        nn.init.zeros_(self.softmax.bias)

    @property
    def context(self) -> nn.Module:
        """The biLM's contextualizer (:func:`contextualizer`; a property, so that it is not a second
        submodule under another name in the state dict)."""
        return contextualizer(self.bilm)

    def set_train_dtype(self, dtype: Optional[torch.dtype]) -> None:
        """Run training steps' matrix products in ``dtype`` (``torch.bfloat16``; ``None`` = float32).

        Weights, gradients and optimizer state stay float32, as do the LSTM cell state and the
        gates' nonlinearities (a transformer's residual stream, layer norms and attention softmax)
        and the loss; evaluation (:meth:`nll`) is always float32.
        """
        self.train_dtype = dtype
        setattr(self.context, "train_dtype", dtype)
        self.bilm.token_encoder.train_dtype = dtype

    def hidden_and_targets(self, batch: LMBatch) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(forward states, forward targets, backward states, backward targets), valid pairs only."""
        _, layers = self.bilm.encode(batch.tokens)
        top = layers[-1]  # [B, T, 2P]
        if self.training and self.dropout > 0:
            top = F.dropout(top, self.dropout, training=True)
        proj = self.bilm.config.projection_dim
        ids = batch.word_ids.to(top.device)
        width = ids.shape[1]
        lengths = batch.tokens.lengths.to(top.device)
        # pair (t, t+1) is valid when t + 1 < length
        valid = torch.arange(width - 1, device=top.device).unsqueeze(0) + 1 < lengths.unsqueeze(1)
        fwd_h = top[:, :-1, :proj][valid]
        fwd_y = ids[:, 1:][valid]
        bwd_h = top[:, 1:, proj:][valid]
        bwd_y = ids[:, :-1][valid]
        return fwd_h, fwd_y, bwd_h, bwd_y

    def forward(self, batch: LMBatch) -> Tuple[torch.Tensor, Dict[str, float]]:
        """Training loss (sum of the two directions' mean NLL) and per-direction NLL stats."""
        fwd_h, fwd_y, bwd_h, bwd_y = self.hidden_and_targets(batch)
        if self.training and self.n_samples and self.n_samples < self.softmax.out_features:
            fwd, bwd = self._sampled_nll(fwd_h, fwd_y), self._sampled_nll(bwd_h, bwd_y)
        else:
            fwd = F.cross_entropy(self._logits(fwd_h), fwd_y)
            bwd = F.cross_entropy(self._logits(bwd_h), bwd_y)
        return fwd + bwd, {"nll_fwd": float(fwd.detach()), "nll_bwd": float(bwd.detach())}

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full-softmax logits; with a ``train_dtype``, the product in it and the logits in float32."""
        if self.train_dtype is None:
            return self.softmax(hidden)
        dtype = self.train_dtype
        return F.linear(hidden.to(dtype), self.softmax.weight.to(dtype)).float() + self.softmax.bias

    @torch.no_grad()
    def nll(self, batch: LMBatch, common: Optional[torch.Tensor] = None) -> Tuple[Tuple[float, float], Optional[Tuple[float, float]], int]:
        """Summed exact NLL of (forward, backward), the same over fewer events when ``common`` is
        given (else ``None``), and the number of predictions per direction.

        ``common`` (bool ``[V]``): the vocabulary ids marked True stay events of their own, every
        other id (``<UNK>`` among them) joins one "other word" event, predicted with their summed
        probability. Both figures come from the same softmax."""
        fwd_h, fwd_y, bwd_h, bwd_y = self.hidden_and_targets(batch)
        fwd, fwd_common = _nll_sums(self.softmax(fwd_h).float(), fwd_y, common)
        bwd, bwd_common = _nll_sums(self.softmax(bwd_h).float(), bwd_y, common)
        collapsed = None if fwd_common is None or bwd_common is None else (float(fwd_common), float(bwd_common))
        return (float(fwd), float(bwd)), collapsed, int(fwd_y.numel())

    def _sampled_nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Sampled softmax with log-uniform candidates and the log-expected-count correction."""
        vocab = self.softmax.out_features
        k = self.n_samples
        # log-uniform (Zipf) over frequency-ranked ids: P(i) = log((i + 2) / (i + 1)) / log(V + 1)
        u = torch.rand(k, device=hidden.device)
        samples = (torch.exp(u * math.log(vocab + 1)) - 1).long().clamp_(0, vocab - 1)

        def log_q(ids: torch.Tensor) -> torch.Tensor:
            p = torch.log((ids.float() + 2) / (ids.float() + 1)) / math.log(vocab + 1)
            return torch.log(k * p)

        w, b = self.softmax.weight, self.softmax.bias
        if self.train_dtype is not None:
            return SampledSoftmaxLoss.apply(hidden, w, b, targets, samples, log_q(targets), log_q(samples), self.train_dtype)
        true_logit = (hidden * w[targets]).sum(-1) + b[targets] - log_q(targets)
        sample_logit = hidden @ w[samples].t() + b[samples] - log_q(samples)
        sample_logit = sample_logit.masked_fill(targets.unsqueeze(1) == samples.unsqueeze(0), float("-inf"))
        logits = torch.cat([true_logit.unsqueeze(1), sample_logit], dim=1)
        return F.cross_entropy(logits, torch.zeros_like(targets))

    @torch.no_grad()
    def init_softmax_from_encoder(self, vocab_tokens: list, counts: list) -> None:
        """Softmax for a biLM that comes without one (the published weights).

        Each word's output vector is its own context-free token vector (layer 0), scaled to
        unit-ish logits, and the bias is its log unigram probability: before any training the
        head predicts the unigram distribution, nudged toward words that resemble the state.
        """
        from ..bilm.characters import TokenBatch

        chunks = []
        for start in range(0, len(vocab_tokens), 2048):
            tokens = TokenBatch.from_sentences([list(vocab_tokens[start : start + 2048])])
            chunks.append(self.bilm.token_encoder(tokens.char_ids)[tokens.token_index[0, 1:-1]])
        vectors = torch.cat(chunks)
        vectors = vectors / vectors.norm(dim=1, keepdim=True).clamp_min(1e-6)
        self.softmax.weight.copy_(vectors / math.sqrt(self.bilm.config.projection_dim))
        total = float(sum(counts)) + len(counts)
        self.softmax.bias.copy_(torch.tensor([math.log((c + 1) / total) for c in counts]))


def contextualizer(bilm: BiLM) -> nn.Module:
    """The module that contextualizes ``bilm``'s tokens and that training steers (its ``dropout`` and
    ``train_dtype``): an LSTM biLM's stack or a transformer biLM's pair of stacks."""
    for name in ("lstm", "transformer"):
        module = getattr(bilm, name, None)
        if isinstance(module, nn.Module) and hasattr(module, "train_dtype"):
            return module
    raise ValueError(f"pretrain and finetune train LSTM and transformer biLMs; training a {type(bilm).__name__} is not supported")


def _nll_sums(logits: torch.Tensor, targets: torch.Tensor, common: Optional[torch.Tensor]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The summed NLL of ``targets``, and with ``common`` the summed NLL with every id outside it
    merged into one event (see :meth:`BiLMLanguageModel.nll`), from one log-softmax."""
    log_p = torch.log_softmax(logits, dim=-1)
    own = log_p.gather(1, targets.unsqueeze(1)).squeeze(1)
    if common is None:
        return -own.sum(), None
    other = torch.logsumexp(log_p.masked_fill(common.unsqueeze(0), float("-inf")), dim=-1)
    return -own.sum(), -torch.where(common[targets], own, other).sum()
