"""A nearest-neighbour index over token occurrences: the k most similar tokens in context.

Every non-whitespace token of the added Docs is one occurrence: its ELMo vector (under a layer
choice, see :mod:`spacy_elmo.senses.vectors`), scaled to unit length, plus where it came from (Doc
id, sentence id, token index in the Doc, text, and optionally the sentence's text). A query (a
token in context, a Span, or a vector) returns the occurrences with the highest cosine.

Search is exact by default: one matrix product per block of ``block_size`` occurrences, the top k
kept across blocks. ``backend="hnswlib"`` (the optional ``ann`` extra) builds an HNSW graph for
approximate search over millions of occurrences; ``ef``/``M`` trade recall for speed.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy.tokens import Doc, Span, Token

from .. import files
from ..bilm.fingerprint import FingerprintError
from ..senses.vectors import LayerSpec, check_spec, doc_vectors, normalise, span_vector, token_vector

BACKENDS = ("exact", "hnswlib")
FORMAT = "spacy-elmo.token-index"
VERSION = 2  # 2: config.json is written last and lists the files; the biLM's fingerprint
CONFIG = "config.json"
MEMBERS = ("vectors.npy", "meta.npy", "context_ids.npy", "strings.json", "hnsw.bin")


@dataclass(frozen=True)
class Neighbour:
    """One occurrence found by a query."""

    score: float  # cosine
    doc: int
    sentence: int  # sentence number within the Doc (-1 when the Doc has no sentence boundaries)
    token: int  # token index within the Doc
    text: str
    context: Optional[str] = None  # the sentence's text, if the index stores contexts


def topk(scores: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """Per row, the ``k`` highest scores and their columns, best first."""
    k = min(k, scores.shape[1])
    if k == 0:
        return np.zeros((len(scores), 0), dtype=scores.dtype), np.zeros((len(scores), 0), dtype=np.int64)
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    part_scores = np.take_along_axis(scores, part, 1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    return np.take_along_axis(part_scores, order, 1), np.take_along_axis(part, order, 1)


def exact_search(matrix: np.ndarray, queries: np.ndarray, k: int, block_size: int = 65536) -> Tuple[np.ndarray, np.ndarray]:
    """Top-k inner products of ``queries`` against the rows of ``matrix``, in blocks of rows."""
    best_s = np.zeros((len(queries), 0), dtype=np.float32)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(matrix), block_size):
        s, i = topk(queries @ matrix[start : start + block_size].T, k)
        both_s, both_i = np.concatenate([best_s, s], 1), np.concatenate([best_i, i + start], 1)
        best_s, pos = topk(both_s, k)
        best_i = np.take_along_axis(both_i, pos, 1)
    return best_s, best_i


class _Hnsw:
    """hnswlib's HNSW graph over unit vectors (inner product = cosine)."""

    def __init__(self, dim: int, M: int = 16, ef_construction: int = 100, ef: int = 64, threads: int = 1) -> None:
        try:
            import hnswlib
        except ImportError:  # pragma: no cover - depends on the environment
            raise ImportError(
                "backend 'hnswlib' needs the hnswlib package: pip install \"spacy-elmo[ann]\" (or use backend='exact')"
            ) from None
        self.module, self.dim, self.M, self.ef_construction, self.ef, self.threads = hnswlib, dim, M, ef_construction, ef, threads
        self.index = None
        self.lock = threading.Lock()

    def build(self, matrix: np.ndarray) -> None:
        index = self.module.Index(space="ip", dim=self.dim)
        index.init_index(max_elements=max(1, len(matrix)), ef_construction=self.ef_construction, M=self.M, random_seed=0)
        index.add_items(matrix, np.arange(len(matrix)), num_threads=self.threads)
        index.set_ef(self.ef)
        self.index = index

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """The graph's search width is raised to ``k`` (when larger than ``ef``) for this query
        only and restored after it, under a lock: concurrent queries never see each other's
        setting, and a query leaves the graph as it found it."""
        assert self.index is not None
        with self.lock:
            k = min(k, self.index.get_current_count())
            self.index.set_ef(max(self.ef, k))
            try:
                labels, distances = self.index.knn_query(queries, k=k, num_threads=self.threads)
            finally:
                self.index.set_ef(self.ef)
        return (1.0 - distances).astype(np.float32), labels.astype(np.int64)

    def save(self, path: Path) -> None:
        assert self.index is not None
        self.index.save_index(str(path))

    def load(self, path: Path, n: int) -> None:
        index = self.module.Index(space="ip", dim=self.dim)
        index.load_index(str(path), max_elements=max(1, n))
        index.set_ef(self.ef)
        self.index = index


class TokenIndex:
    """Nearest-neighbour search over token occurrences (see the module docstring).

    ``layer``: which vectors (None = the Doc's mix, ``doc.tensor``). ``backend``: ``"exact"`` or
    ``"hnswlib"`` (``M``, ``ef_construction``, ``ef`` are its graph parameters; the defaults gave
    recall@10 0.987 against exact search at 1M occurrences, 0.12 ms a query, ``bench/neighbours.py``;
    ``threads`` builds and searches the graph in parallel). ``store_context``:
    keep each sentence's text so that results can show it. ``fingerprint``: the
    :func:`~spacy_elmo.bilm.fingerprint.bilm_fingerprint` of the biLM whose vectors are added,
    saved with the index so that :meth:`check_fingerprint` can refuse another model's queries.

    Queries may run from several threads at once (they build a pending index once, under a lock,
    and leave it unchanged); adding is not thread safe.
    """

    def __init__(
        self,
        layer: LayerSpec = None,
        backend: str = "exact",
        *,
        block_size: int = 65536,
        store_context: bool = True,
        M: int = 32,
        ef_construction: int = 200,
        ef: int = 64,
        threads: int = 1,
        fingerprint: Optional[str] = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.layer, self.backend, self.block_size, self.store_context = check_spec(layer), backend, int(block_size), bool(store_context)
        self.ann_params: Dict[str, int] = {"M": int(M), "ef_construction": int(ef_construction), "ef": int(ef), "threads": int(threads)}
        self.dim: Optional[int] = None
        self._blocks: List[np.ndarray] = []
        self._matrix: Optional[np.ndarray] = None
        self._meta: List[np.ndarray] = []  # [n, 4] int64: doc, sentence, token, text id
        self._meta_all: Optional[np.ndarray] = None
        self._strings: Dict[str, int] = {}
        self._string_list: List[str] = []
        self._contexts: List[str] = []  # indexed by the global sentence number
        self._context_of: List[np.ndarray] = []
        self._context_all: Optional[np.ndarray] = None
        self._ann: Optional[_Hnsw] = None
        self._next_doc = 0
        self._n = 0
        self._lock = threading.RLock()
        self.fingerprint = fingerprint

    # ------------------------------------------------------------------ adding

    def __len__(self) -> int:
        return self._n

    def _string(self, text: str) -> int:
        if text not in self._strings:
            self._strings[text] = len(self._string_list)
            self._string_list.append(text)
        return self._strings[text]

    def add(
        self,
        vectors: np.ndarray,
        docs: Sequence[int],
        sentences: Sequence[int],
        tokens: Sequence[int],
        texts: Sequence[str],
        contexts: Optional[Sequence[str]] = None,
    ) -> None:
        """Add occurrences from raw vectors ``[n, dim]`` and their metadata (``contexts``: each one's sentence text)."""
        vectors = np.asarray(vectors, dtype=np.float32)
        n = len(texts)
        if vectors.ndim != 2 or len(vectors) != n or not (len(docs) == len(sentences) == len(tokens) == n):
            raise ValueError(
                f"add: vectors of shape {vectors.shape} for {n} texts, {len(docs)} docs, {len(sentences)} sentences, {len(tokens)} tokens"
            )
        if self.dim is None:
            self.dim = int(vectors.shape[1])
        elif vectors.shape[1] != self.dim:
            raise ValueError(f"vectors of dimension {vectors.shape[1]} for an index of dimension {self.dim}")
        if not np.isfinite(vectors).all():
            raise ValueError("vectors contain NaN or infinite values")
        self._flush()
        self._n += n
        self._blocks.append(normalise(vectors))
        self._meta.append(
            np.stack(
                [
                    np.asarray(docs, np.int64),
                    np.asarray(sentences, np.int64),
                    np.asarray(tokens, np.int64),
                    np.array([self._string(t) for t in texts], np.int64),
                ],
                1,
            ).reshape(n, 4)
        )
        if self.store_context:
            if contexts is None:
                raise ValueError("add: this index stores contexts (store_context=True): pass contexts")
            ids = np.empty(n, np.int64)
            last: Optional[str] = None
            for j, c in enumerate(contexts):
                if c != last:
                    self._contexts.append(c)
                    last = c
                ids[j] = len(self._contexts) - 1
            self._context_of.append(ids)
        self._next_doc = max(self._next_doc, int(np.max(docs)) + 1 if n else 0)

    def add_docs(self, docs: Iterable[Doc], doc_ids: Optional[Iterable[int]] = None, max_total: Optional[int] = None) -> None:
        """Add every non-whitespace token of Docs processed by ``elmo`` (ids: 0, 1, ... unless given).

        ``max_total``: stop when the index holds exactly that many occurrences (the last Doc is cut)."""
        if max_total is not None and max_total < 0:
            raise ValueError(f"max_total must be >= 0, got {max_total}")
        ids = iter(doc_ids) if doc_ids is not None else None
        for doc in docs:
            if max_total is not None and self._n >= max_total:
                break
            doc_id = next(ids) if ids is not None else self._next_doc
            vectors = doc_vectors(doc, self.layer)
            sentence_of = np.full(len(doc), -1, np.int64)
            sentence_text: List[str] = [doc.text] * len(doc)
            if doc.has_annotation("SENT_START"):
                for number, sent in enumerate(doc.sents):
                    sentence_of[sent.start : sent.end] = number
                    sentence_text[sent.start : sent.end] = [sent.text.strip()] * len(sent)
            rows = [t.i for t in doc if not t.is_space]
            if max_total is not None:
                rows = rows[: max_total - self._n]
            self.add(
                vectors[rows],
                [doc_id] * len(rows),
                sentence_of[rows].tolist(),
                rows,
                [doc[i].text for i in rows],
                [sentence_text[i] for i in rows] if self.store_context else None,
            )
            self._next_doc = max(self._next_doc, doc_id + 1)

    def _flush(self) -> None:
        """Turn the concatenated matrix back into one block (before adding more)."""
        if self._matrix is not None:
            self._blocks, self._meta = [self._matrix], [self._meta_all]  # type: ignore[list-item]
            if self.store_context:
                self._context_of = [self._context_all]  # type: ignore[list-item]
            self._matrix = self._meta_all = self._context_all = None
            self._ann = None

    def build(self) -> "TokenIndex":
        """Join the added blocks (and build the ANN graph for an approximate backend). Queries call
        it; it is idempotent and locked, so concurrent first queries build once."""
        with self._lock:
            return self._build()

    def _build(self) -> "TokenIndex":
        if self._matrix is None:
            if not self._blocks:
                raise ValueError("the index is empty: add Docs (add_docs) or vectors (add) first")
            self._matrix = np.concatenate(self._blocks) if len(self._blocks) > 1 else self._blocks[0]
            self._meta_all = np.concatenate(self._meta) if len(self._meta) > 1 else self._meta[0]
            if self.store_context:
                self._context_all = np.concatenate(self._context_of) if len(self._context_of) > 1 else self._context_of[0]
            self._blocks, self._meta, self._context_of = [], [], []
        if self.backend != "exact" and self._ann is None:
            p = self.ann_params
            self._ann = _Hnsw(self.dim or 0, M=p["M"], ef_construction=p["ef_construction"], ef=p["ef"], threads=p["threads"])
            self._ann.build(self._matrix)
        return self

    # ------------------------------------------------------------------ querying

    def _query_vector(self, item: Union[Token, Span, Doc, np.ndarray]) -> np.ndarray:
        if isinstance(item, Token):
            vector = token_vector(item, self.layer)
        elif isinstance(item, Span):
            vector = span_vector(item, self.layer)
        elif isinstance(item, Doc):
            vector = span_vector(item[:], self.layer)
        else:
            vector = np.asarray(item, dtype=np.float32)
        if self.dim is not None and vector.shape[-1] != self.dim:
            raise ValueError(f"query vector of dimension {vector.shape[-1]} for an index of dimension {self.dim}")
        return vector

    def search(self, queries: np.ndarray, k: int = 10, exact: Optional[bool] = None) -> Tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)``, each ``[n_queries, k]``, best first, for raw query vectors ``[n, dim]``.

        ``exact`` forces exact search (True) or the ANN graph (False); default: the backend's way.
        """
        self.build()
        assert self._matrix is not None
        queries = np.asarray(queries, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None]
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries of shape {queries.shape} for an index of dimension {self.dim}")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        queries = normalise(queries)
        use_exact = self.backend == "exact" if exact is None else exact
        if not use_exact:
            if self._ann is None:
                raise ValueError("this index has no ANN graph (backend='exact'): search exactly")
            return self._ann.search(queries, k)
        out_s, out_i = [], []
        for start in range(0, len(queries), 256):
            s, i = exact_search(self._matrix, queries[start : start + 256], k, self.block_size)
            out_s.append(s)
            out_i.append(i)
        return np.concatenate(out_s), np.concatenate(out_i)

    def neighbour(self, row: int, score: float) -> Neighbour:
        assert self._meta_all is not None
        doc, sentence, token, text = (int(x) for x in self._meta_all[row])
        context = self._contexts[int(self._context_all[row])] if self.store_context and self._context_all is not None else None
        return Neighbour(float(score), doc, sentence, token, self._string_list[text], context)

    def rows_of(self, word: str) -> np.ndarray:
        """The occurrences whose text is ``word`` (case-insensitive)."""
        self.build()
        assert self._meta_all is not None
        wanted = [i for i, text in enumerate(self._string_list) if text.lower() == word.lower()]
        return np.nonzero(np.isin(self._meta_all[:, 3], wanted))[0]

    def query(
        self, item: Union[Token, Span, Doc, np.ndarray], k: int = 10, exact: Optional[bool] = None, word: Optional[str] = None
    ) -> List[Neighbour]:
        """The ``k`` occurrences most similar to a token in context, a Span (its mean vector) or a vector.

        ``word``: only occurrences of this word (case-insensitive; searched exactly), e.g. the
        query token's own text, for the senses of one word as in the paper's "play" table.
        """
        vector = self._query_vector(item)
        if word is None:
            scores, ids = self.search(vector, k, exact=exact)
            return [self.neighbour(int(i), float(s)) for s, i in zip(scores[0], ids[0]) if i >= 0]
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        rows = self.rows_of(word)
        assert self._matrix is not None
        scores, ids = exact_search(self._matrix[rows], normalise(vector.reshape(1, -1)), k, self.block_size)
        return [self.neighbour(int(rows[i]), float(s)) for s, i in zip(scores[0], ids[0])]

    # ------------------------------------------------------------------ serialisation

    def check_fingerprint(self, fingerprint: str, source: str = "this biLM") -> None:
        """Raise :class:`FingerprintError` if the index was built with another biLM than the one
        whose fingerprint is given (an index that records none is not checked)."""
        if self.fingerprint is not None and fingerprint != self.fingerprint:
            raise FingerprintError(
                f"the index was built with the biLM whose fingerprint is {self.fingerprint[:12]}, but {source} is "
                f"{fingerprint[:12]}: query it with the biLM that built it, or rebuild the index with this one"
            )

    def save(self, path: Union[str, Path]) -> None:
        """Write the index to a folder (vectors, metadata, strings, contexts, the ANN graph);
        ``config.json`` is written last, so a folder without it is an interrupted save."""
        self.build()
        folder = files.start_folder(path, CONFIG)
        written = ["vectors.npy", "meta.npy", "strings.json"]
        files.save_npy(folder / "vectors.npy", np.asarray(self._matrix))
        files.save_npy(folder / "meta.npy", self._meta_all)
        if self.store_context:
            files.save_npy(folder / "context_ids.npy", self._context_all)
            written.append("context_ids.npy")
        files.write_json(folder / "strings.json", {"texts": self._string_list, "contexts": self._contexts}, indent=None)
        if self._ann is not None:
            files.write_atomic(folder / "hnsw.bin", self._ann.save, by_path=True)
            written.append("hnsw.bin")
        for name in set(MEMBERS) - set(written):  # left by an earlier save with other settings
            if (folder / name).exists():
                (folder / name).unlink()
        config = {
            "format": FORMAT,
            "version": VERSION,
            "layer": self.layer,
            "backend": self.backend,
            "block_size": self.block_size,
            "store_context": self.store_context,
            "dim": self.dim,
            "n": len(self),
            "bilm_fingerprint": self.fingerprint,
            **self.ann_params,
        }
        files.finish_folder(folder, CONFIG, config, written)

    @classmethod
    def load(cls, path: Union[str, Path], mmap: bool = False) -> "TokenIndex":
        """Read a folder written by :meth:`save` (``mmap``: map the vectors instead of reading them).
        A partial folder (an interrupted save, a missing file) is an error that names it."""
        path = Path(path)
        config = files.check_folder(path, CONFIG, "token index", MEMBERS)
        if config.get("format") != FORMAT:
            raise ValueError(f"{path}/{CONFIG}: not a token index (format {config.get('format')!r})")
        if config.get("version") not in (1, VERSION):
            raise ValueError(
                f"{path}/{CONFIG}: token index version {config.get('version')!r} is not supported (this release reads 1 and {VERSION})"
            )
        needed = (
            ["vectors.npy", "meta.npy", "strings.json"]
            + (["context_ids.npy"] if config["store_context"] else [])
            + (["hnsw.bin"] if config["backend"] != "exact" else [])
        )
        missing = [name for name in needed if not (path / name).is_file()]
        if missing:
            raise files.IncompleteFolderError(
                f"{path}: {', '.join(missing)} missing: the token index is incomplete; build and save it again"
            )
        index = cls(
            layer=config["layer"],
            backend=config["backend"],
            block_size=config["block_size"],
            store_context=config["store_context"],
            M=config["M"],
            ef_construction=config["ef_construction"],
            ef=config["ef"],
            threads=config["threads"],
            fingerprint=config.get("bilm_fingerprint"),
        )
        index.dim = config["dim"]
        index._matrix = np.load(path / "vectors.npy", mmap_mode="r" if mmap else None)
        index._meta_all = np.load(path / "meta.npy")
        if len(index._matrix) != config["n"] or len(index._meta_all) != config["n"]:
            raise ValueError(f"{path}: {len(index._matrix)} vectors and {len(index._meta_all)} metadata rows, config says {config['n']}")
        index._n = int(config["n"])
        strings = json.loads((path / "strings.json").read_text(encoding="utf-8"))
        index._string_list, index._contexts = strings["texts"], strings["contexts"]
        index._strings = {t: i for i, t in enumerate(index._string_list)}
        if index.store_context:
            index._context_all = np.load(path / "context_ids.npy")
        index._next_doc = int(index._meta_all[:, 0].max()) + 1 if len(index._meta_all) else 0
        if index.backend != "exact":
            p = index.ann_params
            index._ann = _Hnsw(index.dim, M=p["M"], ef_construction=p["ef_construction"], ef=p["ef"], threads=p["threads"])
            index._ann.load(path / "hnsw.bin", len(index._matrix))
        return index


def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    """Mean share of the exact top k found by the approximate search."""
    k = exact_ids.shape[1]
    return float(np.mean([len(set(a[:k]) & set(e)) / k for a, e in zip(approx_ids, exact_ids)]))
