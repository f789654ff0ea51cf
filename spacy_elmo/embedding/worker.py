"""The work of one chunk, wherever it runs: tokenize, embed, reduce the layers, write the shard.

A process keeps the :class:`ChunkEmbedder` of its most recent :class:`EmbedSpec` s
(:func:`get_embedder`; at most :data:`MAX_EMBEDDERS`, least recently used dropped first), so a
worker process (local pool or cluster worker) loads the biLM once and reuses it for every chunk,
and a long-lived cluster worker that serves many runs does not keep every biLM it ever loaded.
The cache and each embedder are locked: a Dask worker running several threads loads a spec's
biLM once and embeds one chunk at a time with it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple, Union

import numpy as np

from . import shards
from .reader import Chunk, CorpusError

LAYERS = ("all", "top", "mix")
TOKENIZERS = ("whitespace", "spacy")
#: BiLM.INFERENCE_PRECISIONS, written out so that checking options does not import torch (a test holds them together)
PRECISIONS = ("float32", "bfloat16", "int8")
MixValue = Union[str, Tuple[float, ...]]


@dataclass(frozen=True)
class EmbedSpec:
    """Everything that decides a chunk's output (hashable: the key of the per-process cache)."""

    weights: str  # a model folder path, or en_default
    layers: str = "all"
    mix: MixValue = "average"
    tokenizer: str = "whitespace"
    lang: str = "en"
    batch_tokens: int = 4096
    max_line_tokens: int = 10_000
    skip_empty: bool = False
    threads: int = 1
    precision: str = "float32"  # the biLM's inference precision (BiLM.set_inference_precision)


def make_tokenizer(kind: str, lang: str) -> Callable[[str], List[str]]:
    """``whitespace``: ``str.split`` (pre-tokenized input, like ``allennlp elmo``); ``spacy``: the
    language's spaCy tokenizer, whitespace tokens dropped (as the ``elmo`` component does)."""
    if kind == "whitespace":
        return str.split
    if kind != "spacy":
        raise CorpusError(f"--tokenizer {kind!r}: use whitespace (pre-tokenized lines) or spacy.")
    import spacy

    tokenizer = spacy.blank(lang).tokenizer
    return lambda text: [t.text for t in tokenizer(text) if not t.is_space]


class ChunkEmbedder:
    """A loaded biLM plus the layer reduction of a spec."""

    loads = 0  # biLMs this process has loaded (reported back so that tests can check "once per worker")

    def __init__(self, spec: EmbedSpec) -> None:
        import torch

        from ..bilm import ScalarMix
        from ..hub.load import load_bilm

        self.spec = spec
        self.lock = threading.Lock()
        self.bilm = load_bilm(spec.weights)
        self.bilm.set_inference_precision(spec.precision)
        # an embedder only reads: it holds the LSTM's weights once, in int8
        if spec.precision == "int8" and self.bilm.can_release_float_products:
            self.bilm.release_float_products()
        ChunkEmbedder.loads += 1
        self.tokenize = make_tokenizer(spec.tokenizer, spec.lang)
        self.mixer: Optional[ScalarMix] = None
        if spec.layers == "mix":
            mix = spec.mix if isinstance(spec.mix, str) else list(spec.mix)
            self.mixer = ScalarMix(self.bilm.n_output_layers, mix, trainable=False)
        self._torch = torch

    def reduce(self, layers: np.ndarray) -> np.ndarray:
        """``[L+1, n, dim]`` -> ``[n, L+1, dim]`` (all), ``[n, dim]`` (top, or the mix as the ``elmo`` component computes it)."""
        if self.spec.layers == "all":
            return layers.transpose(1, 0, 2)
        if self.spec.layers == "top":
            return layers[-1]
        assert self.mixer is not None
        with self._torch.inference_mode():
            return self.mixer(self._torch.from_numpy(layers)).numpy()

    def embed(self, chunk: Chunk) -> Tuple[List[int], List[List[str]], List[str], np.ndarray]:
        """Corpus lines, tokens, texts and token-major vectors of a chunk's non-empty lines (one
        chunk at a time per embedder: the tokenizer's cache is not thread safe)."""
        with self.lock:
            return self._embed(chunk)

    def _embed(self, chunk: Chunk) -> Tuple[List[int], List[List[str]], List[str], np.ndarray]:
        lines: List[int] = []
        tokens: List[List[str]] = []
        texts: List[str] = []
        for offset, text in enumerate(chunk.texts):
            words = self.tokenize(text)
            line = chunk.first_line + offset
            if not words and not self.spec.skip_empty:
                raise CorpusError(f"corpus line {line} has no tokens: remove it, or pass --skip-empty.")
            if len(words) > self.spec.max_line_tokens:
                raise CorpusError(
                    f"corpus line {line} has {len(words):,} tokens, more than --max-line-tokens {self.spec.max_line_tokens:,}: split it or raise the limit."
                )
            if words:
                lines.append(line)
                tokens.append(words)
                texts.append(text)
        width = (self.bilm.n_output_layers, self.bilm.output_dim) if self.spec.layers == "all" else (self.bilm.output_dim,)
        offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in tokens], out=offsets[1:])
        vectors = np.empty((int(offsets[-1]), *width), dtype=np.float32)  # filled in place: the chunk's vectors exist once
        for index, array in self.bilm.iter_embeddings(tokens, max_batch_tokens=self.spec.batch_tokens):
            vectors[offsets[index] : offsets[index + 1]] = self.reduce(array)
        return lines, tokens, texts, vectors


MAX_EMBEDDERS = 2  # biLMs a process keeps loaded (a run uses one; two let consecutive runs overlap)
_EMBEDDERS: "OrderedDict[EmbedSpec, ChunkEmbedder]" = OrderedDict()
_EMBEDDERS_LOCK = threading.Lock()


def get_embedder(spec: EmbedSpec) -> ChunkEmbedder:
    """This process's embedder for ``spec``, loading the biLM on first use (thread safe: threads
    asking for the same spec at once load it once). Keeps the :data:`MAX_EMBEDDERS` most
    recently used."""
    with _EMBEDDERS_LOCK:
        embedder = _EMBEDDERS.get(spec)
        if embedder is None:
            embedder = _EMBEDDERS[spec] = ChunkEmbedder(spec)
            while len(_EMBEDDERS) > MAX_EMBEDDERS:
                _EMBEDDERS.popitem(last=False)
        else:
            _EMBEDDERS.move_to_end(spec)
        return embedder


@dataclass
class ChunkResult:
    index: int
    lines: int
    tokens: int
    seconds: float
    pid: int
    loads: int  # biLMs loaded by the process that did the chunk


def embed_chunk(spec: EmbedSpec, folder: str, chunk: Chunk) -> ChunkResult:
    """Embed one chunk and write its shard into ``folder`` (a task: runs in any process)."""
    from ..threads import using_threads

    start = time.perf_counter()
    with using_threads(spec.threads):  # per chunk, so that an in-process run leaves the caller's setting alone
        embedder = get_embedder(spec)
        lines, tokens, texts, vectors = embedder.embed(chunk)
    shards.write_shard(Path(folder) / shards.shard_name(chunk.index), lines, tokens, texts, vectors)
    n_tokens = sum(len(t) for t in tokens)
    return ChunkResult(chunk.index, len(lines), n_tokens, time.perf_counter() - start, os.getpid(), ChunkEmbedder.loads)


# what runs the chunks (a process pool, a Dask cluster): (spec, output folder, chunks) -> their results, in any order
Executor = Callable[[EmbedSpec, Path, Iterator[Chunk]], Iterator[ChunkResult]]
