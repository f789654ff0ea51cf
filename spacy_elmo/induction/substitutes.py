"""What the biLM's own language model puts in a word's place: lexical substitutes for sense induction.

The forward LM's top layer at position i-1 predicts token i, the backward LM's at i+1 predicts
token i: read at the *neighbours* of a target (never at the target itself, which has seen it),
their softmax over the vocabulary is a distribution of words that could stand where the target
stands. :class:`LMHead` is that softmax (a vocabulary, ``W [V, P]`` and ``b [V]``): our native
models carry it as ``softmax.pt`` + ``vocab.txt`` (:func:`native_head`); a head from elsewhere
(the published model's, say) plugs in with :meth:`LMHead.from_arrays`.

:func:`lm_states` runs the biLM once per batch of sentences and keeps, per target, only the two
neighbour states (and, with a symmetric pattern, :func:`pattern_sentence`, the two states at the
pattern word) and a compact vector; :meth:`LMHead.top_substitutes` turns states into the
``top_k`` substitutes of each direction, optionally corrected by the LM's prior. Nothing holds a
sentence's full layer tensor longer than its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..bilm import BiLM
from ..bilm.characters import TokenBatch
from ..bilm.scalar_mix import MixSpec, spec_weights
from ..lang.english import inflection_bases  # the English rules' home; imported from here too
from ..vocabulary import VocabularyError, read_vocabulary

SOFTMAX_FILE, VOCAB_FILE = "softmax.pt", "vocab.txt"
SCORE_BUDGET = 1 << 30  # bytes of [rows, V] scores alive at once in top_substitutes (1 GiB)
SCORE_COPIES = 2  # float32 [rows, V] arrays alive at the peak: the logits and their log-softmax
SPECIALS = ("<S>", "</S>", "<UNK>")


class HeadError(ValueError):
    """An LM head that cannot be used (missing files, damaged, or another model's)."""


@dataclass
class LMHead:
    """A biLM's word softmax: ``logits = h @ weight.T + bias`` over ``vocab`` (shared by both directions).

    weight: float32 ``[V, P]``; bias: float32 ``[V]``; ``P`` is the biLM's projection size.
    """

    vocab: List[str]
    weight: torch.Tensor
    bias: torch.Tensor
    source: str = ""
    counts: Optional[np.ndarray] = None  # int64 ``[V]``: each word's count in the training text (vocab.txt), where known

    @classmethod
    def from_arrays(
        cls, vocab: Sequence[str], weight: object, bias: object, source: str = "", counts: Optional[Sequence[int]] = None
    ) -> "LMHead":
        """A head from any ``(vocab, W [V, dim], b [V])`` triple (numpy arrays or tensors), with the
        words' training counts where known (``None``, or all zero: unknown)."""
        w = torch.as_tensor(np.asarray(weight, dtype=np.float32) if not isinstance(weight, torch.Tensor) else weight).float()
        b = torch.as_tensor(np.asarray(bias, dtype=np.float32) if not isinstance(bias, torch.Tensor) else bias).float()
        vocab = list(vocab)
        what = source or "the LM head"
        if w.ndim != 2 or b.ndim != 1:
            raise HeadError(f"{what}: expected W [V, dim] and b [V], got shapes {tuple(w.shape)} and {tuple(b.shape)}")
        if not (len(vocab) == w.shape[0] == b.shape[0]):
            raise HeadError(
                f"{what}: the vocabulary has {len(vocab)} words but the softmax has {w.shape[0]} rows and {b.shape[0]} biases: "
                "the head does not match its vocabulary"
            )
        if not torch.isfinite(w).all() or not torch.isfinite(b).all():
            raise HeadError(f"{what}: the softmax holds NaN or infinite values")
        known = None
        if counts is not None:
            known = np.asarray(counts, dtype=np.int64)
            if known.shape != (len(vocab),) or (known < 0).any():
                raise HeadError(f"{what}: expected one count >= 0 per vocabulary word ({len(vocab)}), got shape {known.shape}")
            known = known if known.any() else None
        return cls(vocab, w.contiguous(), b.contiguous(), source, known)

    def frequencies(self) -> Optional[np.ndarray]:
        """float64 ``[V]``: each word's share of the training text's tokens (``None`` where the counts are unknown)."""
        return None if self.counts is None else self.counts / float(self.counts.sum())

    @property
    def dim(self) -> int:
        return int(self.weight.shape[1])

    def __len__(self) -> int:
        return len(self.vocab)

    def check(self, bilm: BiLM) -> None:
        """Refuse a head whose input size is not the biLM's projection size (another model's head)."""
        if self.dim != bilm.config.projection_dim:
            raise HeadError(
                f"{self.source or 'the LM head'} takes {self.dim}-dimensional states but the biLM's LSTM projection is "
                f"{bilm.config.projection_dim}: the head belongs to another model; use the head saved with these weights"
            )

    @torch.inference_mode()
    def log_probs(self, states: torch.Tensor) -> torch.Tensor:
        """float32 ``[n, V]`` log-probabilities for states ``[n, P]``."""
        return torch.log_softmax(states.float() @ self.weight.T + self.bias, dim=-1)

    @torch.inference_mode()
    def top_substitutes(
        self,
        states: torch.Tensor,
        k: int,
        exclude: Optional[torch.Tensor] = None,
        log_prior: Optional[torch.Tensor] = None,
        prior_weight: float = 1.0,
        chunk: Optional[int] = None,
        budget: int = SCORE_BUDGET,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """The ``k`` best words for each state ``[n, P]``: ids int32 ``[n, k]`` and scores float32
        ``[n, k]``, best first; ``exclude`` (bool ``[V]``) words never come out.

        The score is the log-probability of the full softmax, or with ``log_prior`` (float ``[V]``,
        the log of a prior ``p(w)``) the prior-corrected ``log p(w | context) - prior_weight * log p(w)``:
        at weight 1 the pointwise mutual information of word and context, which demotes the words
        that every context predicts.

        States are scored ``chunk`` rows at a time; by default as many as keep the scores within
        ``budget`` bytes (:func:`score_rows`: 169 rows for the published 793,471-word head, 4,473
        for the 30,000 words of ``en_default``).
        """
        k = min(k, len(self))
        rows = score_rows(len(self), budget) if chunk is None else chunk
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"chunk={chunk!r}: give a positive number of rows (or None for the memory budget)")
        prior = prior_weight * log_prior.float() if log_prior is not None and prior_weight else None
        ids_out, values_out = [], []
        for start in range(0, len(states), rows):
            logp = self.log_probs(states[start : start + rows])
            if prior is not None:
                logp.sub_(prior)  # in place: no third [rows, V] array
            if exclude is not None:
                logp.masked_fill_(exclude, float("-inf"))
            values, ids = logp.topk(k, dim=-1)
            del logp  # freed before the next chunk's scores are made
            ids_out.append(ids.to(torch.int32).cpu().numpy())
            values_out.append(values.cpu().numpy())
        if not ids_out:
            return np.zeros((0, k), np.int32), np.zeros((0, k), np.float32)
        return np.concatenate(ids_out), np.concatenate(values_out)


def score_rows(words: int, budget: int = SCORE_BUDGET) -> int:
    """How many states :meth:`LMHead.top_substitutes` scores at once so that its float32
    ``[rows, words]`` arrays (:data:`SCORE_COPIES` alive at the peak) stay within ``budget`` bytes
    (at least one row)."""
    return max(1, budget // (SCORE_COPIES * 4 * max(1, words)))


def native_head(folder: Union[str, Path]) -> LMHead:
    """The head a spacy-elmo model folder carries (``softmax.pt`` + ``vocab.txt``); one line naming what is wrong."""
    folder = Path(folder)
    softmax, vocab_file = folder / SOFTMAX_FILE, folder / VOCAB_FILE
    for path in (softmax, vocab_file):
        if not path.is_file():
            raise HeadError(
                f"{folder} has no {path.name}: substitutes need the model's LM head (a model trained by spacy-elmo carries "
                "softmax.pt and vocab.txt); use --representation vectors, or a model with its head"
            )
    try:
        state = torch.load(softmax, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any failure to read it means the same thing
        raise HeadError(f"{softmax}: not a readable softmax state ({error})") from None
    if not isinstance(state, dict) or not {"weight", "bias"} <= set(state):
        raise HeadError(f"{softmax}: expected a state dict with 'weight' and 'bias'")
    try:
        vocabulary = read_vocabulary(vocab_file)
    except VocabularyError as error:
        raise HeadError(str(error)) from None
    return LMHead.from_arrays(vocabulary.tokens, state["weight"], state["bias"], source=str(softmax), counts=vocabulary.counts)


# ---------------------------------------------------------------------------------------------- states


@dataclass
class TargetStates:
    """Per target: the forward LM's state before it and the backward LM's after it (``[n, P]``
    each, top layer), its vector under the chosen mix (float32 ``[n, 2P]``) and, when read with
    a symmetric pattern, the two LMs' states at the pattern word (``[n, P]`` each, else ``None``)."""

    forward: torch.Tensor
    backward: torch.Tensor
    vectors: np.ndarray
    pattern_forward: Optional[torch.Tensor] = None
    pattern_backward: Optional[torch.Tensor] = None

    def readings(self) -> List[torch.Tensor]:
        """The states that predict the target's substitutes: forward, backward, then the pattern's two if read."""
        out = [self.forward, self.backward]
        if self.pattern_forward is not None and self.pattern_backward is not None:
            out += [self.pattern_forward, self.pattern_backward]
        return out


def pattern_sentence(tokens: Sequence[str], position: int, word: str = "and") -> List[str]:
    """The sentence with the target repeated around ``word``: ``w1 .. X and X .. wn`` (X = ``tokens[position]``).

    The forward LM at ``word`` has read ``w1 .. X and`` and predicts what follows (Amrami &
    Goldberg's dynamic symmetric pattern "X and ___"); the backward LM at ``word`` has read
    ``wn .. X and`` from the right and predicts what precedes ("___ and X"). Each direction's
    LSTM sees only its own side, so the forward states up to the first X and the backward states
    from the second X on are the plain sentence's: one run gives both readings.
    """
    if not 0 <= position < len(tokens):
        raise ValueError(f"position {position} is outside a sentence of {len(tokens)} tokens")
    return [*tokens[: position + 1], word, *tokens[position:]]


@torch.inference_mode()
def lm_states(
    bilm: BiLM, sentences: Sequence[Sequence[str]], positions: Sequence[int], mix: MixSpec = (0.0, 1.0, 1.0), pattern: Optional[str] = None
) -> TargetStates:
    """Run the biLM over ``sentences`` (one batch) and keep only each target's neighbour states and vector.

    ``positions[j]`` is the target's token index in ``sentences[j]``. In the boundary-padded
    sequence the target sits at ``t + 1``: the forward state at ``t`` (``<S>`` for the first word)
    and the backward state at ``t + 2`` (``</S>`` after the last) both predict it. With
    ``pattern`` (a word, e.g. ``"and"``) the biLM reads :func:`pattern_sentence` instead, and the
    states at the pattern word are kept too; the plain states and the vector are unchanged.
    """
    shift = 0
    if pattern is not None:
        sentences = [pattern_sentence(s, p, pattern) for s, p in zip(sentences, positions)]
        shift = 2  # the target's second copy, from which the backward LM reads the plain sentence
    batch = TokenBatch.from_sentences([list(s) for s in sentences])
    tokens, layers = bilm.encode(batch)
    rows = torch.arange(len(sentences))
    at = torch.as_tensor(list(positions), dtype=torch.long)
    proj = bilm.config.projection_dim
    top = layers[-1]
    forward = top[rows, at, :proj].float().clone()
    backward = top[rows, at + 2 + shift, proj:].float().clone()
    weights = spec_weights(list(mix) if not isinstance(mix, str) else mix, len(layers) + 1)
    stack = [torch.cat([tokens, tokens], dim=-1)[rows, at + 1]]
    for layer in layers:  # forward half at the target, backward half at its copy (the plain sentence's states)
        stack.append(torch.cat([layer[rows, at + 1, :proj], layer[rows, at + 1 + shift, proj:]], dim=-1))
    vectors = sum(float(w) * s.float() for w, s in zip(weights, stack) if w)
    out = TargetStates(forward, backward, np.asarray(vectors, dtype=np.float32))
    if pattern is not None:
        out.pattern_forward = top[rows, at + 2, :proj].float().clone()
        out.pattern_backward = top[rows, at + 2, proj:].float().clone()
    return out


# ---------------------------------------------------------------------------------------------- folding


def fold_vocabulary(
    vocab: Sequence[str], lemmatize: Optional[Dict[str, str]] = None, bases: Callable[[str], List[str]] = inflection_bases
) -> np.ndarray:
    """int64 ``[V]``: each word's representative id (its lemma's), so that inflected substitutes count as one.

    With ``lemmatize`` (word -> lemma, e.g. spaCy's lookup table), a word maps to its lemma's id
    when the lemma is in the vocabulary. Otherwise a conservative folding learnt from the
    vocabulary itself: lower case, then a candidate base from ``bases`` (the language's:
    :meth:`..lang.Language.bases`; by default a regular English inflection, -s, -es, -ies, -ed,
    -d, -ing, doubled consonants) is folded onto only when that base is itself a word of the
    vocabulary (``banks`` -> ``bank``). Without parts of speech it sometimes folds too far
    (``news`` -> ``new``): tolerable for bags of substitutes, which only need inflections merged.
    """
    index: Dict[str, int] = {}
    for i, word in enumerate(vocab):
        index.setdefault(word.lower(), i)
    out = np.arange(len(vocab), dtype=np.int64)
    for i, word in enumerate(vocab):
        lower = word.lower()
        base: Optional[str] = None
        if lemmatize is not None:
            lemma = lemmatize.get(lower) or lemmatize.get(word)
            base = lemma.lower() if lemma and lemma.lower() in index else None
        if base is None:
            base = next((c for c in bases(lower) if c in index), lower)
        out[i] = index.get(base, index[lower])
    return out


def content_mask(vocab: Sequence[str], exclude: Sequence[str] = ()) -> torch.Tensor:
    """bool ``[V]``: the words never used as substitutes (the specials, anything without a letter, ``exclude``)."""
    banned = set(SPECIALS) | {w.lower() for w in exclude}
    return torch.tensor([w in banned or w.lower() in banned or not any(c.isalpha() for c in w) for w in vocab])
