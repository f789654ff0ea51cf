"""What a ``weights`` value names, as the files to load.

Accepted everywhere weights are given (``load_bilm``, the ``elmo`` component's ``weights``, the
command line): a published model's name (cached, else downloaded; an ELMoForManyLangs one is
unpacked and converted once: :mod:`.efml_archive`), ``en_default``, a folder (the spacy-elmo
format, ``options.json`` + one ``.hdf5``, the published file names, or an ELMoForManyLangs model
folder, converted once: :mod:`.efml`), AllenNLP's transformer ELMo as its ``.tar.gz`` or unpacked
folder (converted once: :mod:`.trf_archive`), or a list of the options and weights files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List, Optional, Sequence, Union

from ..bilm.efml_folder import is_efml_folder
from ..bilm.errors import WeightsError
from .download import Location, cached_location, ensure_downloaded
from .efml import efml_native_folder
from .published import PUBLISHED, PublishedModel, names_hint
from .trf_archive import is_trf_source, trf_native_folder

DEFAULT_MODEL = "en_default"
DEFAULT_NAMES = (DEFAULT_MODEL, "default")  # the embedded default English model
# the embedded default ships in the package's data folder spacy_elmo/models/: found by its path, so
# that the biLM does not import the data package (which re-exports default_model_path)
MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
NATIVE_CONFIG, NATIVE_WEIGHTS = "config.json", "weights.pt"
HDF5_SUFFIXES = (".hdf5", ".h5")

WeightsSpec = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


def default_model_path() -> Path:
    """Directory of the embedded default English biLM (spacy-elmo native format)."""
    path = MODELS_DIR / DEFAULT_MODEL
    if not (path / "config.json").is_file():
        raise WeightsError(
            f"the embedded default model is missing from this installation ({path}); "
            "reinstall spacy-elmo or pass config={'weights': PATH}"
        )
    return path


def is_name(spec: Any) -> bool:
    """True for a published model's name that is not also an existing path."""
    return isinstance(spec, str) and spec in PUBLISHED and not Path(spec).exists()


def named_model(spec: Any) -> Optional[PublishedModel]:
    """The record of the published model that ``spec`` names (see :func:`is_name`), else None: the
    one look-up of a name; what follows takes the record."""
    return PUBLISHED[spec] if is_name(spec) else None


def normalise_spec(spec: Any) -> Union[str, List[str]]:
    """The ``weights`` setting as stored in a config: a string, or a list of the two files."""
    if isinstance(spec, (str, os.PathLike)):
        return str(spec)
    if isinstance(spec, (list, tuple)):
        return [str(p) for p in spec]
    raise WeightsError(f"weights={spec!r}: use a published model name, a folder, or a list of the options.json and .hdf5 files")


def check_weights_spec(spec: Any) -> None:
    """Validate a ``weights`` value without loading or downloading anything (one-line errors):
    ``None``/``en_default`` and published names are accepted as they are; a list must name an
    existing options file and ``.hdf5`` file; a folder must exist and hold a biLM in one of the two
    formats (``config.json``, or an options file with one ``.hdf5`` file beside it)."""
    if spec is None or (isinstance(spec, str) and spec in DEFAULT_NAMES and not Path(spec).exists()):
        return
    value = normalise_spec(spec)
    if isinstance(value, str) and is_name(value):
        return
    resolve_weights(value, download=False)  # a path or a pair: only the file system is read


def _pair(files: Sequence[str]) -> Location:
    if len(files) != 2:
        raise WeightsError(f"weights={list(files)!r}: a list must hold exactly two files, options.json and the .hdf5 weights")
    paths = [Path(f) for f in files]
    options = [p for p in paths if p.suffix.lower() == ".json"]
    weights = [p for p in paths if p.suffix.lower() in HDF5_SUFFIXES]
    if len(options) != 1 or len(weights) != 1:
        raise WeightsError(f"weights={list(files)!r}: expected one .json options file and one .hdf5 weights file")
    for path in paths:
        if not path.is_file():
            raise WeightsError(f"weights: file not found: {path}")
    return Location(False, None, options[0], weights[0])


def find_original_files(directory: Path) -> Location:
    """The options file (``options.json`` or one ``*options.json``) and the one HDF5 file in ``directory``."""
    options = directory / "options.json"
    if not options.is_file():
        named = sorted(p for p in directory.glob("*options.json") if p.is_file())
        if len(named) > 1:
            raise WeightsError(f"{directory}: several options files ({', '.join(p.name for p in named)}); pass the two files explicitly")
        if not named:
            raise WeightsError(
                f"{directory}: neither {NATIVE_CONFIG} (spacy-elmo format) nor options.json (original format; or the published *_options.json) found"
            )
        options = named[0]
    candidates = sorted(
        p for p in directory.iterdir() if p.suffix.lower() in HDF5_SUFFIXES and p.is_file() and "softmax" not in p.name.lower()
    )  # a published LM head (``*_softmax_weights.hdf5``) may sit beside the weights
    if not candidates:
        raise WeightsError(f"{directory}: {options.name} found but no .hdf5 weights file beside it")
    if len(candidates) > 1:
        preferred = [p for p in candidates if "weight" in p.name.lower()]
        if len(preferred) != 1:
            names = ", ".join(p.name for p in candidates)
            raise WeightsError(f"{directory}: several .hdf5 files ({names}); pass weight_file= to choose one")
        candidates = preferred
    return Location(False, directory, options, candidates[0])


def resolve_weights(spec: WeightsSpec, *, download: bool = True) -> Location:
    """The files behind a ``weights`` value: a published name (cached, else downloaded unless
    ``download=False``), ``en_default``, a folder (spacy-elmo format, ``options.json`` + one
    ``.hdf5``, or the published file names), or a list of the options and weights files."""
    value = normalise_spec(spec)
    if isinstance(value, list):
        return _pair(value)
    if value in DEFAULT_NAMES and not Path(value).exists():
        return Location(True, default_model_path())
    model = named_model(value)
    if model is not None:
        return cached_location(model) if not download else ensure_downloaded(model)
    path = Path(value)
    if not path.exists():
        raise WeightsError(
            f"ELMo weights not found: {value!r} does not exist, and is not a model name; give a published model name ({names_hint()}), "
            "en_default (null in a config), a folder with config.json (spacy-elmo format) or options.json + one .hdf5 file (original format), "
            "or the two files as a list"
        )
    if is_trf_source(path):  # AllenNLP's transformer ELMo (.tar.gz or folder): its conversion, made once
        return Location(True, trf_native_folder(path, convert=download))
    if path.is_file():
        raise WeightsError(f"{path} is a file: pass its folder, or the options.json and .hdf5 files as a list")
    if is_efml_folder(path):  # the authors' folder: its conversion (made on first use unless download=False)
        return Location(True, efml_native_folder(path, convert=download))
    if (path / NATIVE_CONFIG).is_file() or ((path / NATIVE_WEIGHTS).is_file() and not any(path.glob("*options.json"))):
        return Location(True, path)  # weights.pt alone: an interrupted save, which load_native reports as such
    return find_original_files(path)
