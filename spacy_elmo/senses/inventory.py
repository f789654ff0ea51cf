"""A sense inventory: the mean ELMo vector of each sense of each lemma (nearest-centroid WSD).

Built from labelled examples (a token in context, its sense label and its lemma), as in Peters et
al. (2018, section 5.3): every sense's centroid is the mean vector of its examples; a new
occurrence of the lemma takes the sense whose centroid is nearest by cosine. The example counts
also give each lemma's most frequent sense, the back-off when the nearest-centroid choice is
impossible (no usable vector) or, with ``min_score``, too uncertain.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import srsly
from spacy.tokens import Token

from .vectors import LayerSpec, check_spec, normalise, token_vector

FORMAT = "spacy-elmo.senses"
KEYS = ("lemma", "lemma_pos", "lower")


@dataclass(frozen=True)
class SensePrediction:
    """A disambiguation: the sense, the cosine to its centroid (None if it has none) and how it was chosen."""

    sense: str
    score: Optional[float]
    method: str  # "centroid" or "most_frequent"


def token_key(token: Token, key: str) -> str:
    """The inventory key of a token: its lemma, ``lemma|POS`` or its lower-case form."""
    if key == "lower":
        return token.lower_
    if key not in KEYS:
        raise ValueError(f"key must be one of {KEYS}, got {key!r}")
    if not token.lemma_:
        raise ValueError(
            f"token {token.text!r} has no lemma: sense disambiguation with key={key!r} needs lemmas; put a "
            "lemmatizer (with what it needs, e.g. tagger + attribute_ruler) before it, give the Doc lemmas, or use key='lower'"
        )
    if key == "lemma":
        return token.lemma_.lower()
    if not token.pos_:
        raise ValueError(f"token {token.text!r} has no POS tag: key='lemma_pos' needs coarse POS tags (token.pos_)")
    return f"{token.lemma_.lower()}|{token.pos_}"


class SenseInventory:
    """Sense centroids per lemma (``key`` says how a token's lemma key is formed).

    ``layer`` chooses the vectors (see :mod:`spacy_elmo.senses.vectors`: ``None`` = the Doc's mix);
    disambiguation uses the same choice as building, so it is stored with the inventory, as is
    ``fingerprint``: the :func:`~spacy_elmo.bilm.fingerprint.bilm_fingerprint` of the biLM whose
    vectors built it (the ``elmo_senses`` component refuses a pipeline with another biLM).
    """

    def __init__(self, layer: LayerSpec = None, key: str = "lemma", fingerprint: Optional[str] = None) -> None:
        if key not in KEYS:
            raise ValueError(f"key must be one of {KEYS}, got {key!r}")
        self.layer = check_spec(layer)
        self.key = key
        self.fingerprint = fingerprint
        self.dim: Optional[int] = None
        self._rows: Dict[str, Dict[str, int]] = {}  # lemma -> sense -> row
        self._sums: List[np.ndarray] = []  # per row, float64
        self._n_vectors: List[int] = []
        self._counts: List[int] = []
        self._cache: Dict[str, Tuple[List[str], np.ndarray]] = {}
        self.names: Dict[str, str] = {}  # sense label -> a readable name (induced senses: "bank: river / shore / edge")

    # ------------------------------------------------------------------ building

    def _row(self, lemma: str, sense: str) -> int:
        if not lemma or not sense:
            raise ValueError(f"lemma and sense must be non-empty strings, got {lemma!r} and {sense!r}")
        senses = self._rows.setdefault(lemma, {})
        if sense not in senses:
            senses[sense] = len(self._counts)
            self._sums.append(np.zeros(self.dim or 0, dtype=np.float64))
            self._n_vectors.append(0)
            self._counts.append(0)
        self._cache.pop(lemma, None)
        return senses[sense]

    def _check_dim(self, vector: np.ndarray) -> np.ndarray:
        vector = np.asarray(vector, dtype=np.float64).reshape(-1)
        if self.dim is None:
            self.dim = int(vector.shape[0])
            self._sums = [np.zeros(self.dim) if s.shape[0] == 0 else s for s in self._sums]
        elif vector.shape[0] != self.dim:
            raise ValueError(f"vector of dimension {vector.shape[0]} for an inventory of dimension {self.dim}")
        if not np.isfinite(vector).all():
            raise ValueError("vector contains NaN or infinite values")
        return vector

    def add(self, lemma: str, sense: str, vector: Optional[np.ndarray] = None, count: int = 1) -> None:
        """Count one example of ``sense`` (``count`` of them without a vector: frequency only)."""
        if vector is not None:
            vector = self._check_dim(vector)
        row = self._row(lemma, sense)
        self._counts[row] += 1 if vector is not None else int(count)
        if vector is not None:
            if self._sums[row].shape[0] == 0:
                self._sums[row] = np.zeros(len(vector))
            self._sums[row] += vector
            self._n_vectors[row] += 1

    def add_vectors(self, lemmas: Sequence[str], senses: Sequence[str], vectors: np.ndarray) -> None:
        """Add many examples at once: ``vectors`` is ``[n, dim]``, one row per (lemma, sense)."""
        vectors = np.asarray(vectors, dtype=np.float64)
        if vectors.ndim != 2 or len(vectors) != len(lemmas) or len(lemmas) != len(senses):
            raise ValueError(f"add_vectors: {len(lemmas)} lemmas, {len(senses)} senses and vectors of shape {vectors.shape}")
        if len(lemmas) == 0:
            return
        self._check_dim(vectors[0])
        if vectors.shape[1] != self.dim:
            raise ValueError(f"vectors of dimension {vectors.shape[1]} for an inventory of dimension {self.dim}")
        rows = np.array([self._row(lemma, s) for lemma, s in zip(lemmas, senses)])
        sums = np.stack([s if s.shape[0] else np.zeros(vectors.shape[1]) for s in self._sums])
        np.add.at(sums, rows, vectors)
        self._sums = list(sums)
        for row, n in zip(*np.unique(rows, return_counts=True)):
            self._n_vectors[row] += int(n)
            self._counts[row] += int(n)

    def add_token(self, token: Token, sense: str, lemma: Optional[str] = None) -> None:
        """Add a token in context (its Doc processed by ``elmo``) as an example of ``sense``."""
        self.add(lemma if lemma is not None else token_key(token, self.key), sense, token_vector(token, self.layer))

    def add_examples(self, examples: Iterable[Union[Tuple[Token, str], Tuple[Token, str, Optional[str]]]]) -> "SenseInventory":
        """Add ``(token, sense)`` or ``(token, sense, lemma)`` examples; returns self."""
        for example in examples:
            self.add_token(*example)
        return self

    @classmethod
    def from_examples(cls, examples: Iterable[Any], layer: LayerSpec = None, key: str = "lemma") -> "SenseInventory":
        """An inventory from ``(token, sense[, lemma])`` examples."""
        return cls(layer=layer, key=key).add_examples(examples)

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, lemma: str) -> bool:
        return lemma in self._rows

    @property
    def lemmas(self) -> List[str]:
        return list(self._rows)

    def senses(self, lemma: str) -> Dict[str, int]:
        """``sense -> number of examples`` for a lemma (empty if unknown)."""
        return {s: self._counts[r] for s, r in self._rows.get(lemma, {}).items()}

    def centroid(self, lemma: str, sense: str) -> Optional[np.ndarray]:
        row = self._rows.get(lemma, {}).get(sense)
        if row is None or self._n_vectors[row] == 0:
            return None
        return (self._sums[row] / self._n_vectors[row]).astype(np.float32)

    def most_frequent(self, lemma: str) -> Optional[str]:
        """The sense with the most examples (ties: the one added first); None for an unknown lemma."""
        senses = self._rows.get(lemma)
        if not senses:
            return None
        return max(senses, key=lambda s: (self._counts[senses[s]], -senses[s]))

    def _centroids(self, lemma: str) -> Tuple[List[str], np.ndarray]:
        if lemma not in self._cache:
            names = [s for s, r in self._rows[lemma].items() if self._n_vectors[r] > 0]
            matrix = (
                np.stack([self._sums[self._rows[lemma][s]] / self._n_vectors[self._rows[lemma][s]] for s in names])
                if names
                else np.zeros((0, self.dim or 0))
            )
            self._cache[lemma] = (names, normalise(matrix))
        return self._cache[lemma]

    # ------------------------------------------------------------------ disambiguation

    def disambiguate_vector(
        self, lemma: str, vector: np.ndarray, min_score: Optional[float] = None, prior_weight: Optional[float] = None
    ) -> Optional[SensePrediction]:
        """The sense of ``lemma`` whose centroid is nearest to ``vector`` (cosine).

        With ``prior_weight`` (lambda), the sense maximising ``cosine + lambda * log p(sense |
        lemma)`` instead, ``p`` being the senses' example counts over the lemma's (the prior that
        the most frequent sense follows alone). None for an unknown lemma. Back-off to the most
        frequent sense when no sense of the lemma has a centroid, the vector is zero, or the chosen
        sense's cosine is below ``min_score``.
        """
        vectors = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        return self.predict([lemma], vectors, min_score=min_score, prior_weight=prior_weight)[0]

    def disambiguate(
        self, token: Token, lemma: Optional[str] = None, min_score: Optional[float] = None, prior_weight: Optional[float] = None
    ) -> Optional[SensePrediction]:
        """Disambiguate a token in context (its Doc processed by ``elmo``); None for an unknown lemma."""
        key = lemma if lemma is not None else token_key(token, self.key)
        if key not in self._rows:
            return None
        return self.disambiguate_vector(key, token_vector(token, self.layer), min_score=min_score, prior_weight=prior_weight)

    def log_prior(self, lemma: str, senses: Sequence[str]) -> np.ndarray:
        """``log p(sense | lemma)`` of each of ``senses``: its example count over the lemma's total."""
        counts = self.senses(lemma)
        total = sum(counts.values())
        return np.log(np.array([counts[s] for s in senses], dtype=np.float64) / total).astype(np.float32)

    def predict(
        self, lemmas: Sequence[str], vectors: np.ndarray, min_score: Optional[float] = None, prior_weight: Optional[float] = None
    ) -> List[Optional[SensePrediction]]:
        """:meth:`disambiguate_vector` for many ``(lemma, vector)`` pairs at once."""
        if prior_weight is not None and not (np.isfinite(prior_weight) and prior_weight >= 0):
            raise ValueError(f"prior_weight must be a finite number >= 0 (or None), got {prior_weight!r}")
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(lemmas):
            raise ValueError(f"predict: {len(lemmas)} lemmas but vectors of shape {vectors.shape}")
        if self.dim is not None and len(lemmas) and vectors.shape[1] != self.dim:
            raise ValueError(f"vectors of dimension {vectors.shape[1]} for an inventory of dimension {self.dim}")
        unit = normalise(vectors)
        groups: Dict[str, List[int]] = defaultdict(list)
        for i, lemma in enumerate(lemmas):
            groups[lemma].append(i)
        out: List[Optional[SensePrediction]] = [None] * len(lemmas)
        for lemma, idx in groups.items():
            if lemma not in self._rows:
                continue
            names, centroids = self._centroids(lemma)
            scores = unit[idx] @ centroids.T if names else np.zeros((len(idx), 0), dtype=np.float32)
            ranked = scores
            if prior_weight and names:
                ranked = scores + np.float32(prior_weight) * self.log_prior(lemma, names)
            fallback = self.most_frequent(lemma)
            if fallback is None:  # a lemma without senses: no prediction
                continue
            for j, i in enumerate(idx):
                if names and np.any(unit[i]):
                    best = int(np.argmax(ranked[j]))
                    if min_score is None or scores[j, best] >= min_score:
                        out[i] = SensePrediction(names[best], float(scores[j, best]), "centroid")
                        continue
                score = float(scores[j, names.index(fallback)]) if fallback in names and np.any(unit[i]) else None
                out[i] = SensePrediction(fallback, score, "most_frequent")
        return out

    # ------------------------------------------------------------------ serialisation

    def to_bytes(self) -> bytes:
        rows = [(lemma, sense, row) for lemma, senses in self._rows.items() for sense, row in senses.items()]
        dim = self.dim or 0
        sums = np.stack([self._sums[r] if self._sums[r].shape[0] else np.zeros(dim) for _, _, r in rows]) if rows else np.zeros((0, dim))
        return srsly.msgpack_dumps(
            {
                "format": FORMAT,
                "version": 1,
                "fingerprint": self.fingerprint,
                "layer": self.layer,
                "key": self.key,
                "dim": self.dim,
                "lemmas": [lemma for lemma, _, _ in rows],
                "senses": [s for _, s, _ in rows],
                "counts": [self._counts[r] for _, _, r in rows],
                "n_vectors": [self._n_vectors[r] for _, _, r in rows],
                "sums": sums.astype(np.float32).tobytes(),
                "names": dict(self.names),
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> "SenseInventory":
        try:
            msg = srsly.msgpack_loads(data)
        except Exception as error:  # noqa: BLE001 - any decoding failure means the same thing
            raise ValueError(f"not a serialised sense inventory ({error})") from None
        if not isinstance(msg, dict) or msg.get("format") != FORMAT:
            raise ValueError("not a serialised sense inventory (format marker missing)")
        if msg.get("version") != 1:
            raise ValueError(f"sense inventory format version {msg.get('version')} is not supported (expected 1)")
        inventory = cls(layer=msg["layer"], key=msg["key"], fingerprint=msg.get("fingerprint"))
        inventory.dim = msg["dim"]
        inventory.names = {str(k): str(v) for k, v in (msg.get("names") or {}).items()}  # absent before names existed
        dim = inventory.dim or 0
        sums = np.frombuffer(msg["sums"], dtype=np.float32).reshape(len(msg["lemmas"]), dim).astype(np.float64)
        for lemma, sense, count, n, total in zip(msg["lemmas"], msg["senses"], msg["counts"], msg["n_vectors"], sums):
            row = inventory._row(lemma, sense)
            inventory._sums[row] = total.copy()
            inventory._counts[row], inventory._n_vectors[row] = int(count), int(n)
        return inventory

    def to_disk(self, path: Union[str, Path]) -> None:
        """Write the inventory to one file (atomically: the old file or the new one, never a mix)."""
        from ..files import write_bytes

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, self.to_bytes())

    @classmethod
    def from_disk(cls, path: Union[str, Path]) -> "SenseInventory":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"sense inventory file {path} not found")
        try:
            return cls.from_bytes(path.read_bytes())
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    def __repr__(self) -> str:
        n = sum(len(s) for s in self._rows.values())
        return f"SenseInventory({len(self)} lemmas, {n} senses, dim={self.dim}, key={self.key!r}, layer={self.layer!r})"

    def check_fingerprint(self, fingerprint: str, source: str = "this biLM") -> None:
        """Raise ``FingerprintError`` if another biLM built the inventory (one that records none is not checked)."""
        if self.fingerprint is not None and fingerprint != self.fingerprint:
            from ..bilm.fingerprint import FingerprintError

            raise FingerprintError(
                f"the sense inventory was built with the biLM whose fingerprint is {self.fingerprint[:12]}, but {source} is "
                f"{fingerprint[:12]}: use the biLM that built it, or rebuild the inventory with this one"
            )
