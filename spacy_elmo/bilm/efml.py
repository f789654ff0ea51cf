"""ELMoForManyLangs (HIT-SCIR) models as our biLM: their token encoder and their reading of text.

The ELMoForManyLangs models (44 languages) share ELMo's shape (a character CNN, highway layers, a
projection, two layers of LSTMs with projection and clipping) but read text their own way, which
:class:`EfmlBiLM` reproduces exactly:

* characters are Unicode code points looked up in the model's lexicon (``char.dic``), not UTF-8
  bytes; one that is not in it reads as ``<oov>``. A token is ``max_characters_per_token`` (M)
  ids: the lexicon's ``<eow>`` entry, the token's first M - 2 code points, its ``<bow>`` entry
  (their code writes the two markers in this order), then ``<pad>``. The boundary tokens
  ``<bos>``/``<eos>``, and a token spelled so, are ``<eow>``, that entry, ``<bow>``.
* beside the CNN, an optional word embedding (``word.dic``; the token cut to M - 2 code points,
  unknown words read as ``<oov>``) is put before the CNN's output, and one projection maps both
  to the LSTM's width;
* a highway layer is one ``Linear(F, 2F)``: ``y = g * x + (1 - g) * relu(first half)`` with
  ``g = sigmoid(second half)`` (AllenNLP's layout); the CNN applies its activation after the max;
* the LSTMs are AllenNLP's ``LstmCellWithProjection`` with residuals from the second layer on,
  which is our :class:`BiLstmStack` with the gate blocks reordered on reading.

The architecture travels in the options like any biLM's (``lstm``, ``char_cnn``) plus a section
``efml`` (:data:`EFML_KEY`) with the lexicons, M and the word embedding's width; ``char_cnn``'s
``n_characters`` and ``max_characters_per_token`` keep the byte-level values that section's
readers require and are not used. :mod:`.efml_folder` reads the authors' folder.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..kernels import char_trim
from .characters import BOS_TOKEN, EOS_TOKEN, TokenBatch, distinct_tokens
from .model import BiLM, BiLMConfig, OptionsError
from .token_encoder import CharCnnEncoder

EFML_KEY = "efml"
#: the boundary tokens ELMoForManyLangs wraps every sentence in
BOS, EOS = "<bos>", "<eos>"
#: the lexicon entries their reader requires
CHAR_SPECIALS = ("<bow>", "<eow>", "<oov>", "<pad>", BOS, EOS)
WORD_SPECIALS = ("<oov>", "<pad>")
#: the shortest ``max_characters_per_token`` their reader accepts (``<bos>`` and its two markers)
MIN_CHARS = len(BOS) + 2


class EfmlVocab:
    """An ELMoForManyLangs model's lexicons: token string -> ``[1 + M]`` ids (the word id, then
    the M character ids; word id 0 when the model has no word embedding)."""

    #: distinct tokens whose ids are kept (then the memo starts over)
    memo_size = 100_000

    def __init__(self, chars: Dict[str, int], words: Optional[Dict[str, int]], max_chars: int) -> None:
        self.chars, self.words, self.max_chars = chars, words, max_chars
        # their reader names the <eow> entry first and the <bow> entry last (see the module docstring)
        self.first, self.last = chars["<eow>"], chars["<bow>"]
        self.char_oov, self.pad = chars["<oov>"], chars["<pad>"]
        self.word_oov = words["<oov>"] if words is not None else 0
        self._memo: Dict[str, np.ndarray] = {}

    @property
    def width(self) -> int:
        """Ids per token: the word id and ``max_chars`` character ids."""
        return 1 + self.max_chars

    def ids(self, token: str) -> np.ndarray:
        """The read-only ``[1 + M]`` int64 ids of ``token``."""
        found = self._memo.get(token)
        if found is None:
            if len(self._memo) >= self.memo_size:
                self._memo = {}
            found = self._memo[token] = self._ids(token)
        return found

    def _ids(self, token: str) -> np.ndarray:
        cut = token if len(token) + 2 <= self.max_chars else token[: self.max_chars - 2]
        out = np.full(self.width, self.pad, dtype=np.int64)
        out[0] = self.words.get(cut, self.word_oov) if self.words is not None else 0
        chars = [self.chars[cut]] if cut in (BOS, EOS) else [self.chars.get(c, self.char_oov) for c in cut]
        out[1] = self.first
        out[2 : 2 + len(chars)] = chars
        out[2 + len(chars)] = self.last
        out.setflags(write=False)
        return out

    def __getstate__(self) -> Dict[str, Any]:
        return {"chars": self.chars, "words": self.words, "max_chars": self.max_chars}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["chars"], state["words"], state["max_chars"])  # type: ignore[misc]


class EfmlTokenBatch(TokenBatch):
    """A :class:`TokenBatch` whose ``char_ids`` are ELMoForManyLangs ids ``[U, 1 + M]`` and whose
    boundary rows are ``<bos>`` (1) and ``<eos>`` (2)."""

    @classmethod
    def from_vocab(cls, sentences: Sequence[Sequence[str]], vocab: EfmlVocab) -> "EfmlTokenBatch":
        # a token spelled <bos> shares the boundary's row, as their reader reads it
        index, lengths, strings = distinct_tokens(sentences, BOS, EOS)
        ids = np.stack([np.zeros(vocab.width, dtype=np.int64)] + [vocab.ids(s) for s in strings[1:]])
        return cls(torch.from_numpy(index), torch.from_numpy(ids), torch.from_numpy(lengths), strings)


class EfmlTokenEncoder(CharCnnEncoder):
    """ELMoForManyLangs' token encoder: ids ``[N, 1 + M]`` (word id, character ids) -> ``[N, P]``.

    The character CNN (max over positions, then the activation), their highway layers
    (``highways.k`` is one ``Linear(F, 2F)``), the word embedding put before the CNN's output
    (when the model has one) and the projection, as the module docstring describes."""

    def __init__(
        self,
        n_characters: int,
        char_dim: int,
        filters: Sequence[Tuple[int, int]],
        n_highway: int,
        output_dim: int,
        activation: str,
        n_words: int,
        word_dim: int,
        max_chars: int,
    ) -> None:
        super().__init__(n_characters, char_dim, filters, 0, output_dim, activation)
        self.char_embedding.padding_idx = None  # their <pad> row is an ordinary, trained vector
        self.highways = nn.ModuleList(nn.Linear(self.n_filters, 2 * self.n_filters) for _ in range(n_highway))
        self.word_embedding: Optional[nn.Embedding] = nn.Embedding(n_words, word_dim) if word_dim > 0 else None
        self.projection = nn.Linear(self.n_filters + max(word_dim, 0), output_dim)
        self.max_chars = max_chars

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.dim() != 2 or ids.shape[1] != 1 + self.max_chars:
            raise ValueError(
                f"an ELMoForManyLangs token encoder reads [tokens, 1 + {self.max_chars}] ids (EfmlBiLM.token_batch), got {tuple(ids.shape)}"
            )
        if not torch.is_grad_enabled():  # only the character positions the maxima need (same outputs)
            # one more than the widest filter: the word id's column comes before the characters
            return char_trim.encode_trimmed(ids, self.widest_filter + 1, self.inference_chunk, self._encode)
        return self._encode(ids)

    def _encode(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.pooled(ids[:, 1:])  # the char CNN's pooled activation (by tables where they apply)
        for layer in self.highways:
            assert isinstance(layer, nn.Linear)  # a ModuleList types its items as Module
            nonlinear, gate = F.linear(h, layer.weight, layer.bias).chunk(2, dim=-1)
            gate = torch.sigmoid(gate)
            h = gate * h + (1.0 - gate) * torch.relu(nonlinear)
        if self.word_embedding is not None:
            h = torch.cat([self.word_embedding(ids[:, 0]), h], dim=-1)
        assert isinstance(self.projection, nn.Linear)
        return F.linear(h, self.projection.weight, self.projection.bias)


def _section(config: BiLMConfig) -> Dict[str, Any]:
    section = config.extra.get(EFML_KEY)
    if not isinstance(section, dict):
        raise OptionsError(f"the options have no '{EFML_KEY}' section: not an ELMoForManyLangs model")
    return section


def vocab_from_options(section: Dict[str, Any], source: str = "options") -> EfmlVocab:
    """The lexicons of an ``efml`` options section, checked (one-line :class:`OptionsError`)."""

    def lexicon(key: str, specials: Sequence[str], rows_key: str) -> Dict[str, int]:
        table, rows = section.get(key), section.get(rows_key)
        if not isinstance(table, dict) or not isinstance(rows, int) or isinstance(rows, bool):
            raise OptionsError(f"{source}: {EFML_KEY}.{key} (an object of ids) and {EFML_KEY}.{rows_key} (a whole number) are required")
        missing = [s for s in specials if s not in table]
        if missing:
            raise OptionsError(f"{source}: the {key} lexicon lacks {', '.join(missing)}")
        bad = next(((k, v) for k, v in table.items() if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < rows), None)
        if bad is not None:
            raise OptionsError(f"{source}: {key} entry {bad[0]!r} has id {bad[1]!r}, outside the embedding's {rows} rows")
        return table

    max_chars = section.get("max_characters_per_token")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < MIN_CHARS:
        raise OptionsError(f"{source}: {EFML_KEY}.max_characters_per_token must be a whole number >= {MIN_CHARS}, got {max_chars!r}")
    words = lexicon("words", WORD_SPECIALS, "word_rows") if _word_dim(section, source) > 0 else None
    return EfmlVocab(lexicon("chars", CHAR_SPECIALS, "char_rows"), words, max_chars)


def _word_dim(section: Dict[str, Any], source: str) -> int:
    word_dim = section.get("word_dim", 0)
    if isinstance(word_dim, bool) or not isinstance(word_dim, int) or word_dim < 0:
        raise OptionsError(f"{source}: {EFML_KEY}.word_dim must be a whole number >= 0, got {word_dim!r}")
    return word_dim


class EfmlBiLM(BiLM):
    """A biLM that reads text as an ELMoForManyLangs model does (see the module docstring).

    Everything else is :class:`BiLM`'s: stateless by default (every sentence from a zero LSTM
    state, as their first batch runs), ``stateful=True`` for their carried state; the token
    cache; bfloat16 LSTM products (the token encoder stays float32). :meth:`sents2elmo` returns
    their output choices."""

    bf16_token_encoder = False
    int8_token_encoder = False  # its encoder's int8 speed was not measured

    def _build_token_encoder(self, config: BiLMConfig) -> CharCnnEncoder:
        section = _section(config)
        vocab = self.__dict__["_vocab"] = vocab_from_options(section)
        return EfmlTokenEncoder(
            n_characters=int(section["char_rows"]),
            char_dim=config.char_dim,
            filters=config.filters,
            n_highway=config.n_highway,
            output_dim=config.projection_dim,
            activation=config.activation,
            n_words=int(section.get("word_rows") or 0),
            word_dim=_word_dim(section, "options"),
            max_chars=vocab.max_chars,
        )

    @property
    def vocab(self) -> EfmlVocab:
        """The lexicons (read from the options once)."""
        vocab = self.__dict__.get("_vocab")
        if vocab is None:
            vocab = self.__dict__["_vocab"] = vocab_from_options(_section(self.config))
        return vocab

    def token_batch(self, sentences: Sequence[Sequence[str]]) -> TokenBatch:
        return EfmlTokenBatch.from_vocab(sentences, self.vocab)

    def encode(self, batch: TokenBatch, skip_final: bool = False) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        if not isinstance(batch, EfmlTokenBatch):
            batch = self._reread(batch)
        return super().encode(batch, skip_final)

    def _reread(self, batch: TokenBatch) -> EfmlTokenBatch:
        """A batch made by :meth:`TokenBatch.from_sentences` (rows 1 and 2 hold its ``<S>`` and
        ``</S>``), read with this model's lexicons; a literal ``<S>`` in that text was already
        merged with the boundary there (:meth:`token_batch` keeps it a word, as their reader does)."""
        if len(batch.strings) < 3 or batch.strings[1:3] != [BOS_TOKEN, EOS_TOKEN] or len(batch.strings) != len(batch.char_ids):
            raise ValueError("an ELMoForManyLangs biLM reads token strings: make its batches with EfmlBiLM.token_batch(sentences)")
        strings = ["", BOS, EOS, *batch.strings[3:]]
        vocab = self.vocab
        ids = np.stack([np.zeros(vocab.width, dtype=np.int64)] + [vocab.ids(s) for s in strings[1:]])
        return EfmlTokenBatch(batch.token_index, torch.from_numpy(ids), batch.lengths, strings)

    def forward_char_ids(self, char_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError(
            "an ELMoForManyLangs biLM reads Unicode characters through its lexicon: use embed_sentences or token_batch"
        )

    def char_ids(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        """The ``[B, T, 1 + M]`` ids (word id, then characters) the model reads, boundaries included."""
        batch = self.token_batch(sentences)
        return batch.char_ids[batch.token_index]

    def _output_dtype(self) -> Any:
        return np.float64 if next(self.parameters()).dtype == torch.float64 else np.float32

    @torch.inference_mode()
    def embed_batch(self, sentences: Sequence[Sequence[str]], keep_boundaries: bool = False) -> List[np.ndarray]:
        """As :meth:`BiLM.embed_batch`, in float64 for a model cast with ``.double()`` (float32 otherwise)."""
        if not sentences:
            return []
        out = self.forward(self.token_batch(sentences), boundaries=keep_boundaries)
        layers = (out if out.dtype == torch.float64 else out.float()).cpu().numpy()
        width = 2 if keep_boundaries else 0
        return [np.ascontiguousarray(layers[:, row, : len(sentence) + width]) for row, sentence in enumerate(sentences)]

    def sents2elmo(self, sentences: Sequence[Sequence[str]], output_layer: int = -1, batch_size: int = 64) -> List[np.ndarray]:
        """ELMoForManyLangs' output choices, one array per sentence: ``-1`` the average of the
        layers ``[n, 2P]``, ``-2`` all of them ``[L+1, n, 2P]``, ``k`` layer k ``[n, 2P]`` (0 = the
        token layer). Arrays are float32 (float64 for a model cast with ``.double()``)."""
        if not -2 <= output_layer < self.n_output_layers:
            raise ValueError(f"output_layer must be -1 (average), -2 (all) or a layer 0..{self.n_output_layers - 1}, got {output_layer}")
        dtype = self._output_dtype()
        arrays = self.embed_sentences(sentences, batch_size=batch_size)
        if output_layer == -2:
            return [a.astype(dtype, copy=False) for a in arrays]
        if output_layer == -1:
            return [a.astype(np.float64).mean(axis=0).astype(dtype) for a in arrays]
        return [np.ascontiguousarray(a[output_layer], dtype=dtype) for a in arrays]


__all__ = ["BOS", "EFML_KEY", "EOS", "EfmlBiLM", "EfmlTokenBatch", "EfmlTokenEncoder", "EfmlVocab", "vocab_from_options"]
