"""Induced senses of one word, as sense induction produces them and the explore page reads them.

The data model shared by induction (:mod:`.induce`), the inventory built from it and the explore
page: each occurrence of the word in the corpus (its sentence and where the word sits in it), the
senses found (a name from their most distinctive substitutes, their size, their most
representative occurrences) and each occurrence's graded assignment to the senses.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple, Union

import numpy as np


@dataclass(frozen=True)
class Occurrence:
    """One occurrence of the target word: ``text[start:end]`` is the word inside its sentence."""

    text: str
    start: int
    end: int
    source: str = ""  # where it came from: a file and line, a Doc index, an instance id

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end <= len(self.text):
            raise ValueError(f"occurrence span {self.start}:{self.end} is outside its text of {len(self.text)} characters")


@dataclass
class Sense:
    """One induced sense: ``name`` reads like "bank: river / shore / water" (its context words and substitutes)."""

    id: int
    name: str
    substitutes: List[str]  # the most distinctive substitutes, best first
    count: int  # occurrences whose strongest sense this is
    examples: List[int]  # indices into WordSenses.occurrences, most representative first
    context: List[str] = field(default_factory=list)  # the most distinctive context words, best first
    # per example: its cosine similarity to the sense's medoid (the occurrence nearest all the others
    # of the sense) in the representation clustered; empty in senses saved before it was recorded
    typicality: List[float] = field(default_factory=list)


def best_split_line(ws: "WordSenses") -> Optional[str]:
    """One line on the best two-way split where the rule kept one sense (``extra["best_split"]``), or None."""
    split = ws.extra.get("best_split")
    if not split or not split.get("names"):
        return None
    a, b = split["names"]
    return (
        f"not kept (one sense): the best two-way split, {a!r} ({split['sizes'][0]}) / {b!r} ({split['sizes'][1]}), "
        f"z = {split['z']:.2f} against one Gaussian of the same spread (a split needs z < {split['needed']:.2f})"
    )


@dataclass
class WordSenses:
    """The senses induced for one word and the occurrences they were induced from.

    ``weights[i, k]`` is occurrence i's weight for sense k (rows sum to 1); ``labels`` is each
    row's strongest sense; ``vectors`` is the representation each occurrence was clustered by
    (the map and the nearest-occurrence lists of the explore page use it).
    """

    word: str
    forms: List[str]
    occurrences: List[Occurrence]
    senses: List[Sense]
    weights: np.ndarray  # [n_occurrences, n_senses], float32, rows sum to 1
    vectors: np.ndarray  # [n_occurrences, dim], float32
    representation: str = "substitutes"
    note: Optional[str] = None  # e.g. "too few occurrences: one sense"
    extra: dict = field(default_factory=dict)

    @property
    def labels(self) -> np.ndarray:
        """Each occurrence's strongest sense (an index into ``senses``)."""
        return np.asarray(self.weights).argmax(axis=1) if len(self.occurrences) else np.zeros(0, dtype=np.int64)


FORMAT = "spacy-elmo.word-senses.v1"


def word_senses_files(path: Union[str, "os.PathLike[str]"]) -> Tuple[Path, Path]:
    """The two files of a saved :class:`WordSenses`: ``bank`` or ``bank.json`` -> (bank.json, bank.npz)."""
    path = Path(path)
    stem = path.with_suffix("") if path.suffix in (".json", ".npz") else path
    return stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".npz")


def check_word_senses(ws: WordSenses) -> None:
    """Raise ``ValueError`` (one line naming the problem) if the arrays do not fit the occurrences and senses."""
    n, k = len(ws.occurrences), len(ws.senses)
    weights, vectors = np.asarray(ws.weights), np.asarray(ws.vectors)
    if weights.shape != (n, k):
        raise ValueError(
            f"weights of {ws.word!r} have shape {weights.shape}; expected ({n}, {k}): one row per occurrence, one column per sense"
        )
    if vectors.ndim != 2 or vectors.shape[0] != n:
        raise ValueError(f"vectors of {ws.word!r} have shape {vectors.shape}; expected ({n}, dim): one row per occurrence")
    if n and not np.all(np.isfinite(vectors)):
        raise ValueError(f"vectors of {ws.word!r} hold NaN or infinite values")
    if n and (not np.all(np.isfinite(weights)) or not np.allclose(weights.sum(axis=1), 1.0, atol=1e-3)):
        raise ValueError(f"weights of {ws.word!r} are not rows that sum to 1")
    ids = [sense.id for sense in ws.senses]
    if ids != list(range(k)):
        raise ValueError(f"sense ids of {ws.word!r} are {ids}; expected 0..{k - 1} in order (a sense's id is its column in weights)")
    for sense in ws.senses:
        bad = [i for i in sense.examples if not 0 <= i < n]
        if bad:
            raise ValueError(f"sense {sense.id} of {ws.word!r} lists examples {bad[:3]} outside its {n} occurrences")


def save_word_senses(ws: WordSenses, path: Union[str, "os.PathLike[str]"]) -> Path:
    """Save ``ws`` as a JSON file (word, occurrences, senses, note, ``extra``'s JSON values) and an
    ``.npz`` of its arrays (weights, vectors, ``extra``'s numpy arrays) next to it; returns the JSON's path. The JSON is written last and records the ``.npz``'s
    SHA-256, so a reader never pairs it with another save's arrays."""
    from ..files import write_atomic, write_json

    check_word_senses(ws)
    extra_arrays = {f"extra.{key}": np.asarray(value) for key, value in ws.extra.items() if isinstance(value, np.ndarray)}
    extra = {key: value for key, value in ws.extra.items() if not isinstance(value, np.ndarray)}
    try:
        json.dumps(extra)
    except (TypeError, ValueError) as err:
        raise ValueError(f"extra of {ws.word!r} cannot be saved (JSON values and numpy arrays only): {err}") from None
    if any(value.dtype == object for value in extra_arrays.values()):
        raise ValueError(f"extra of {ws.word!r} holds an array of Python objects, which cannot be saved without pickles")
    json_path, npz_path = word_senses_files(path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    if json_path.exists():  # the pair reads as incomplete until the new JSON is in place
        json_path.unlink()
    arrays = {"weights": np.asarray(ws.weights, dtype=np.float32), "vectors": np.asarray(ws.vectors, dtype=np.float32), **extra_arrays}
    write_atomic(npz_path, lambda handle: np.savez(handle, **arrays))  # type: ignore[arg-type]  # numpy's stub types **kwds as bool
    data = {
        "format": FORMAT,
        "word": ws.word,
        "forms": list(ws.forms),
        "representation": ws.representation,
        "note": ws.note,
        "extra": extra,
        "occurrences": [[o.text, o.start, o.end, o.source] for o in ws.occurrences],
        "senses": [asdict(sense) for sense in ws.senses],
        "arrays": {"file": npz_path.name, "sha256": _sha256(npz_path)},
    }
    return write_json(json_path, data, indent=None)


def load_word_senses(path: Union[str, "os.PathLike[str]"]) -> WordSenses:
    """Read what :func:`save_word_senses` wrote (``path``: the JSON, the ``.npz`` or their common stem)."""
    json_path, npz_path = word_senses_files(path)
    if not json_path.is_file():
        raise FileNotFoundError(f"saved word senses not found: {json_path} (save_word_senses writes NAME.json and NAME.npz)")
    try:
        data = json.loads(json_path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{json_path} is not valid JSON: {err}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{json_path} is not a saved WordSenses (no format {FORMAT!r})")
    if not npz_path.is_file():
        raise FileNotFoundError(f"{json_path} has no arrays: {npz_path} is missing")
    if _sha256(npz_path) != data["arrays"]["sha256"]:
        raise ValueError(f"{npz_path} does not belong to {json_path} (SHA-256 differs): save the word senses again")
    extra = dict(data["extra"])
    with np.load(npz_path, allow_pickle=False) as arrays:
        weights, vectors = arrays["weights"], arrays["vectors"]
        extra.update({name[len("extra.") :]: arrays[name] for name in arrays.files if name.startswith("extra.")})
    ws = WordSenses(
        word=data["word"],
        forms=list(data["forms"]),
        occurrences=[Occurrence(text, start, end, source) for text, start, end, source in data["occurrences"]],
        senses=[Sense(**sense) for sense in data["senses"]],
        weights=weights,
        vectors=vectors,
        representation=data["representation"],
        note=data["note"],
        extra=extra,
    )
    check_word_senses(ws)
    return ws


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
