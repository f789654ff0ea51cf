"""A biLM's language-model head: the softmax over its word vocabulary, and that vocabulary.

Two layouts, one loader (:func:`load_lm_head`):

* ours (a model trained by spacy-elmo, e.g. the embedded ``en_default``): ``softmax.pt`` (a
  state dict ``{"weight": [V, dim], "bias": [V]}``, float16 or float32) and ``vocab.txt``
  (``token<TAB>count`` lines);
* the authors' (``elmo-original``; downloaded by name, resumed and checked like the weights):
  an HDF5 file with ``softmax/W`` [V, dim] and ``softmax/b`` [V] and a vocabulary with one token a
  line (793,471 words, most frequent first: 1.6 GB of float32 in all).

Rows follow the vocabulary, which is sorted by frequency, so ``top_n`` keeps the ``top_n`` most
frequent words and reads only their rows; ``dtype=torch.bfloat16`` halves the memory (converted
block by block, never holding a float32 copy of the whole matrix); ``mmap=True`` maps the stored
float32 matrix instead of reading it (pages load on use).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Mapping, NamedTuple, Optional, Tuple

import torch

from ..bilm.errors import WeightsError
from ..vocabulary import VocabularyError, read_vocabulary
from .download import cached_location, ensure_downloaded, ensure_files, fetch_files
from .published import FORMAT_TRF, PUBLISHED, ModelRef, PublishedModel, published_model
from .resolve import DEFAULT_NAMES, WeightsSpec, default_model_path, named_model, normalise_spec
from .trf_archive import is_trf_source, trf_native_folder

NATIVE_SOFTMAX, NATIVE_VOCAB = "softmax.pt", "vocab.txt"
HDF5_WEIGHT, HDF5_BIAS = "softmax/W", "softmax/b"
BLOCK_ROWS = 1 << 15  # rows converted at a time


class LMHead(NamedTuple):
    """The softmax of a biLM: ``logits = hidden @ weight.T + bias`` over ``vocab``, where
    ``hidden`` is one direction's half of the top layer (``projection_dim`` wide; the forward half
    predicts the next word, the backward half the previous one). Unpacks as
    ``vocab, weight, bias``. Where the special tokens (``<S>``, ``</S>``, ``<UNK>``) sit depends on
    the vocabulary: look words up, never assume ids."""

    vocab: List[str]
    weight: torch.Tensor  # [V, dim]
    bias: torch.Tensor  # [V]


# ---------------------------------------------------------------------------------------------
# the published head


def _h5py() -> Any:
    try:
        import h5py
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise WeightsError("the published LM head is an HDF5 file: reading it needs h5py (pip install 'spacy-elmo[hdf5]')") from None
    return h5py


def head_dim(model: ModelRef) -> int:
    """The output dimension (one direction's projection) of a published model's biLM."""
    return published_model(model).config.projection_dim


def _head_files(model: PublishedModel) -> Tuple[str, str]:
    if model.lm_head is None:
        with_head = ", ".join(n for n, m in PUBLISHED.items() if m.lm_head)
        raise WeightsError(f"{model.name} has no published LM head (softmax and vocabulary); models with one: {with_head}")
    return model.lm_head


def check_head_files(softmax: Path, vocab: Path, dim: int) -> int:
    """The shape check of a head in the published layout: ``softmax/W`` [V, ``dim``],
    ``softmax/b`` [V] and V lines of UTF-8 in ``vocab``. Returns V."""
    rows = _hdf5_shape(softmax, dim)
    words = len(read_vocab(vocab))
    if words != rows:
        raise WeightsError(f"{vocab} lists {words:,} words, but {softmax} has {rows:,} rows: the two files do not belong together")
    return rows


def _hdf5_shape(softmax: Path, dim: Optional[int]) -> int:
    h5py = _h5py()
    try:
        handle = h5py.File(softmax, "r")
    except OSError as err:
        raise WeightsError(f"LM head {softmax} is not a readable HDF5 file ({err})") from None
    with handle:
        for key in (HDF5_WEIGHT, HDF5_BIAS):
            if key not in handle or not isinstance(handle[key], h5py.Dataset):
                raise WeightsError(
                    f"LM head {softmax} has no dataset {key} (the published layout: {HDF5_WEIGHT} [V, dim], {HDF5_BIAS} [V])"
                )
        weight, bias = handle[HDF5_WEIGHT].shape, handle[HDF5_BIAS].shape
    if len(weight) != 2 or bias != (weight[0],):
        raise WeightsError(f"LM head {softmax}: {HDF5_WEIGHT} has shape {weight} and {HDF5_BIAS} {bias}; expected [V, dim] and [V]")
    _check_dim(int(weight[1]), dim, str(softmax))
    return int(weight[0])


def _check_dim(found: int, expected: Optional[int], source: str) -> None:
    if expected is not None and found != expected:
        raise WeightsError(
            f"the LM head in {source} takes {found}-dimensional states, but the biLM's output (projection_dim) is {expected}: "
            "they do not belong together"
        )


def download_lm_head(
    model: ModelRef, *, force: bool = False, progress: bool = True, sha256: Optional[Mapping[str, str]] = None
) -> Tuple[Path, Path]:
    """Download (or check the cached copy of) a published model's LM head into its cache folder,
    like :func:`~spacy_elmo.hub.download.download`; returns (softmax HDF5, vocabulary)."""
    model = published_model(model)
    files = _head_files(model)
    dim = model.config.projection_dim
    folder = fetch_files(
        model,
        files,
        lambda paths: check_head_files(paths[0], paths[1], dim),
        force=force,
        progress=progress,
        sha256=sha256,
        command=f"download {model.name} --lm-head",
    )
    return folder / files[0], folder / files[1]


def cached_lm_head(model: PublishedModel, *, download: bool = True) -> Tuple[Path, Path]:
    """The checked files of a published LM head, downloaded first when absent (unless ``download=False``)."""
    files = _head_files(model)
    dim = model.config.projection_dim
    softmax, vocab = ensure_files(
        model, files, lambda paths: check_head_files(paths[0], paths[1], dim), download=download, command=f"download {model.name} --lm-head"
    )
    return softmax, vocab


# ---------------------------------------------------------------------------------------------
# reading


def read_vocab(path: Path) -> List[str]:
    """The tokens of a vocabulary file, read by the package's one reader
    (:func:`~spacy_elmo.vocabulary.read_vocabulary`: one token a line, ``\n`` only)."""
    try:
        return read_vocabulary(path).tokens
    except VocabularyError as err:
        raise WeightsError(str(err)) from None
    except OSError as err:
        raise WeightsError(f"vocabulary {path} cannot be read ({err.strerror})") from None


def _rows(total: int, top_n: Optional[int], source: str) -> int:
    if top_n is None:
        return total
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
        raise WeightsError(f"top_n={top_n!r}: give a positive number of words (or None for all {total:,})")
    return min(top_n, total)


def read_hdf5_head(
    softmax: Path,
    vocab: Path,
    *,
    dim: Optional[int] = None,
    top_n: Optional[int] = None,
    dtype: torch.dtype = torch.float32,
    mmap: bool = False,
) -> LMHead:
    """A head in the published layout (``softmax/W``, ``softmax/b`` and one token a line)."""
    import numpy as np

    h5py = _h5py()
    total = _hdf5_shape(softmax, dim)
    words = read_vocab(vocab)
    if len(words) != total:
        raise WeightsError(f"{vocab} lists {len(words):,} words, but {softmax} has {total:,} rows: the two files do not belong together")
    n = _rows(total, top_n, str(softmax))
    with h5py.File(softmax, "r") as handle:
        data, bias_data = handle[HDF5_WEIGHT], handle[HDF5_BIAS]
        bias = torch.from_numpy(np.asarray(bias_data[:n], dtype=np.float32)).to(dtype)
        if mmap:
            offset = data.id.get_offset()
            if (
                dtype != torch.float32
                or data.chunks is not None
                or data.compression is not None
                or offset is None
                or data.dtype != np.dtype("<f4")
            ):
                raise WeightsError(
                    f"mmap=True needs float32 and a contiguous, uncompressed little-endian float32 {HDF5_WEIGHT} in {softmax}; "
                    "use mmap=False (top_n and bfloat16 also save memory)"
                )
            mapped = np.memmap(softmax, dtype=np.float32, mode="c", offset=offset, shape=(n, data.shape[1]))
            return LMHead(words[:n], torch.from_numpy(mapped), bias)
        weight = torch.empty((n, data.shape[1]), dtype=dtype)
        for start in range(0, n, BLOCK_ROWS):
            stop = min(n, start + BLOCK_ROWS)
            weight[start:stop] = torch.from_numpy(np.asarray(data[start:stop], dtype=np.float32))
    return LMHead(words[:n], weight, bias)


def read_native_head(
    folder: Path, *, dim: Optional[int] = None, top_n: Optional[int] = None, dtype: torch.dtype = torch.float32, mmap: bool = False
) -> LMHead:
    """A head saved by spacy-elmo's trainer: ``softmax.pt`` + ``vocab.txt`` in ``folder``."""
    softmax, vocab = folder / NATIVE_SOFTMAX, folder / NATIVE_VOCAB
    try:
        state = torch.load(softmax, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # torch raises several types for truncated or foreign files
        raise WeightsError(f"LM head {softmax} cannot be read ({type(err).__name__}: {err})") from None
    weight, bias = (state.get("weight"), state.get("bias")) if isinstance(state, dict) else (None, None)
    if not isinstance(weight, torch.Tensor) or not isinstance(bias, torch.Tensor) or weight.dim() != 2 or bias.shape != weight.shape[:1]:
        raise WeightsError(f"LM head {softmax} is not a softmax state dict (expected weight [V, dim] and bias [V])")
    _check_dim(int(weight.shape[1]), dim, str(softmax))
    words = read_vocab(vocab)
    if len(words) != weight.shape[0]:
        raise WeightsError(
            f"{vocab} lists {len(words):,} words, but {softmax} has {weight.shape[0]:,} rows: the two files do not belong together"
        )
    n = _rows(len(words), top_n, str(softmax))
    return LMHead(words[:n], weight[:n].to(dtype), bias[:n].to(dtype))


class HeadLocation(NamedTuple):
    """Where a head lives: ``kind`` ``"native"`` (``first``: its folder) or ``"hdf5"`` (``first``:
    the softmax, ``second``: the vocabulary); ``model``: the published model it belongs to, if any."""

    kind: str
    first: Path
    second: Optional[Path] = None
    model: Optional[PublishedModel] = None


def lm_head_location(weights: Optional[WeightsSpec] = None, *, download: bool = True) -> Tuple[str, Path, Optional[Path]]:
    """Where the head of the biLM that ``weights`` names lives: ``("native", folder, None)`` or
    ``("hdf5", softmax, vocab)``."""
    kind, first, second, _model = _locate_head(weights, download)
    return kind, first, second


def _converted_head(folder: Path, value: str) -> HeadLocation:
    if not (folder / NATIVE_SOFTMAX).is_file():
        raise WeightsError(f"{value}: its archive holds no softmax and vocabulary, so it has no LM head")
    return HeadLocation("native", folder)


def _locate_head(weights: Optional[WeightsSpec], download: bool) -> HeadLocation:
    """:func:`lm_head_location`, with the published model (looked up here, once) when ``weights`` names one."""
    if weights is None or (isinstance(weights, str) and weights in DEFAULT_NAMES and not Path(weights).exists()):
        return HeadLocation("native", default_model_path())
    value = normalise_spec(weights)
    if isinstance(value, list):
        raise WeightsError(f"weights={value!r}: an LM head is found by a model name or a folder, not by the options and weights files")
    model = named_model(value)
    if model is not None and model.format == FORMAT_TRF:  # its archive's softmax, kept by the conversion
        location = ensure_downloaded(model) if download else cached_location(model)
        assert location.folder is not None  # an archive's location is its converted folder
        return _converted_head(location.folder, value)
    if model is not None:
        softmax, vocab = cached_lm_head(model, download=download)
        return HeadLocation("hdf5", softmax, vocab, model)
    if is_trf_source(value):  # AllenNLP's transformer ELMo: the head its conversion keeps
        return _converted_head(trf_native_folder(Path(value), convert=download), value)
    folder = Path(value)
    if (folder / NATIVE_SOFTMAX).is_file():
        return HeadLocation("native", folder)
    if folder.is_dir():
        heads = sorted(p for p in folder.iterdir() if p.is_file() and "softmax" in p.name.lower() and p.suffix.lower() in (".hdf5", ".h5"))
        vocabs = sorted(p for p in folder.iterdir() if p.is_file() and p.name.lower().startswith("vocab") and p.suffix == ".txt")
        if len(heads) == 1 and len(vocabs) == 1:
            return HeadLocation("hdf5", heads[0], vocabs[0])
    raise WeightsError(
        f"{value}: no LM head found; a folder needs {NATIVE_SOFTMAX} + {NATIVE_VOCAB} (a model trained by spacy-elmo) or one "
        "*softmax*.hdf5 + one vocab*.txt (the published layout)"
    )


def load_lm_head(
    weights: Optional[WeightsSpec] = None,
    *,
    top_n: Optional[int] = None,
    dtype: torch.dtype = torch.float32,
    mmap: bool = False,
    download: bool = True,
) -> LMHead:
    """The LM head (vocabulary, softmax weight [V, dim], bias [V]) of the biLM that ``weights``
    names: ``None``/``"en_default"`` (the embedded model), a published name with a head
    (``"elmo-original"``: downloaded once, like the weights, unless ``download=False``), or a
    folder in either layout. ``top_n``: keep the most frequent words only; ``dtype``: of the
    returned tensors; ``mmap``: map the stored matrix instead of reading it. The head must take
    the biLM's output dimension (``projection_dim``), else a one-line error."""
    from .load import read_config

    kind, first, second, model = _locate_head(weights, download)
    dim: Optional[int]
    if model is not None:
        dim = model.config.projection_dim  # known from the record: no second look-up
    else:
        try:
            dim = read_config(weights).projection_dim
        except WeightsError:
            if kind == "native":
                raise
            dim = None  # a folder with a head but no biLM: nothing to compare with
    if kind == "native":
        return read_native_head(first, dim=dim, top_n=top_n, dtype=dtype, mmap=mmap)
    assert second is not None  # the published layout always has its vocabulary
    return read_hdf5_head(first, second, dim=dim, top_n=top_n, dtype=dtype, mmap=mmap)
