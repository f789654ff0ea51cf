"""Loading a biLM from whatever a ``weights`` value names: a published model (downloaded once),
the embedded default, a folder in either format, or the options and weights files.

:mod:`spacy_elmo.bilm.weights` reads and writes the two formats; :mod:`.resolve` turns a name
or a path into the files to read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Tuple

import srsly

from ..bilm.efml_folder import efml_config, is_efml_folder
from ..bilm.errors import WeightsError
from ..bilm.layout import read_options
from ..bilm.model import BiLM, BiLMConfig, OptionsError
from ..bilm.trf_folder import trf_config
from ..bilm.weights import CONFIG_NAME, PathLike, load_native, load_original
from .download import check_options_of, published_config
from .resolve import DEFAULT_NAMES, WeightsSpec, named_model, resolve_weights
from .resolve import find_original_files as _find_original
from .trf_archive import is_trf_source, trf_native_folder


def find_original_files(directory: Path) -> Tuple[Path, Path]:
    """The options file (``options.json`` or the published ``*_options.json``) and the single HDF5
    weights file inside ``directory``."""
    location = _find_original(Path(directory))
    assert location.options is not None and location.weights is not None
    return location.options, location.weights


def load_bilm(
    path: Optional[WeightsSpec] = None,
    *,
    options_file: Optional[PathLike] = None,
    weight_file: Optional[PathLike] = None,
    stateful: bool = False,
) -> BiLM:
    """Load a biLM in eval mode from any supported location.

    With no argument (or ``"en_default"``, or ``"default"``) it loads the embedded default English
    model that ships inside the package. ``path`` may also be a published model's name
    (``"elmo-original"``, ``"efml-de"``, ...: downloaded once into the cache, see :mod:`.download`), a
    spacy-elmo model directory (``config.json`` + ``weights.pt``), a directory holding an options
    file (``options.json`` or the published ``*_options.json``) and one ``.hdf5`` weights file,
    an ELMoForManyLangs model folder (converted once into the cache: :mod:`.efml`), or a list of
    those two files. Or pass ``options_file`` and ``weight_file`` explicitly.
    """
    if path is None and options_file is None and weight_file is None:
        path = DEFAULT_NAMES[0]
    if path is None:
        if options_file is None or weight_file is None:
            raise ValueError("load_bilm needs a path, or both options_file= and weight_file=")
        return load_original(options_file, weight_file, stateful=stateful)
    location = resolve_weights(path)
    if location.native:
        assert location.folder is not None  # a native location always has its folder
        return load_native(location.folder, stateful=stateful)
    assert location.options is not None and location.weights is not None  # an original one, both files
    return load_original(location.options, location.weights, stateful=stateful)


def read_config(weights: Optional[WeightsSpec]) -> BiLMConfig:
    """The architecture of the biLM that ``weights`` names (see :func:`resolve_weights`), read
    from its options without loading any weights, and without downloading a published model
    (its shape is known by name; where its publisher states none, only its options file is
    downloaded)."""
    model = named_model(weights)
    if model is not None:
        return published_config(model)
    if isinstance(weights, (str, os.PathLike)) and is_trf_source(weights):
        if Path(weights).is_dir():
            return trf_config(weights)  # the architecture, read from the archive folder's configuration
        return check_options_of(trf_native_folder(Path(weights)))  # an archive: its conversion (made once)
    if isinstance(weights, (str, os.PathLike)) and is_efml_folder(weights):
        return efml_config(weights, lexicons=False)  # the architecture, read from the authors' folder
    location = resolve_weights(DEFAULT_NAMES[0] if weights is None else weights, download=False)
    if location.native:
        assert location.folder is not None  # a native location always has its folder
        config_path = location.folder / CONFIG_NAME
        if not config_path.is_file():
            load_native(location.folder)  # raises the incomplete-save error that names the folder
        try:
            meta = srsly.read_json(config_path)
        except ValueError as err:
            raise WeightsError(f"{config_path} is not valid JSON: {err}") from None
        options, source = (meta.get("options") if isinstance(meta, dict) else None), str(config_path)
    else:
        assert location.options is not None  # an original location always has its options file
        options, source = read_options(location.options), f"options file {location.options}"
    try:
        return BiLMConfig.from_options(options, source=source)
    except OptionsError as err:
        raise WeightsError(str(err)) from None
