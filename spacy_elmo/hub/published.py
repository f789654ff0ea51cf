"""Published ELMo models by name: the registry, where each one's files live, and the cache folder.

The authors' files live at ``PUBLISHED_BASE`` + each model's folder; ``SPACY_ELMO_MIRROR``
replaces that base (everything up to and including ``allennlp/``) and keeps the rest of the path.
``elmo-original`` also publishes its language-model head (the softmax over its training vocabulary
and that vocabulary) in the same folder: :attr:`PublishedModel.lm_head`. An entry may carry known
SHA-256 digests and sizes of its files (none are known today: the authors publish neither).
Downloaded models are kept in ``SPACY_ELMO_CACHE`` (default: the user's cache folder) under their
names, with the published file names. Downloading and checking: :mod:`.download`; what a
``weights`` value names: :mod:`.resolve`.

A name is looked up once, where it enters (:func:`published_model`); everything below takes the
:class:`PublishedModel` record it gives, never the name again.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from ..bilm.errors import WeightsError
from ..bilm.layout import hdf5_datasets
from ..bilm.model import BiLMConfig
from ..cache import CACHE_ENV, cache_root  # noqa: F401  (re-exported: where published models live)

PUBLISHED_BASE = "https://s3-us-west-2.amazonaws.com/allennlp/"
MIRROR_ENV = "SPACY_ELMO_MIRROR"


@dataclass(frozen=True)
class PublishedModel:
    """One published biLM: its name here, its shape and where its two files live."""

    name: str
    shape: str
    folder: str  # path below the published base
    options_name: str
    weights_name: str
    about: str
    reported: str  # the quality its authors report
    lm_head: Optional[Tuple[str, str]] = None  # (softmax HDF5, vocabulary) beside the weights, if published
    sha256: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)  # known digests by file name
    sizes: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False)  # known sizes by file name

    def url(self, file_name: str) -> str:
        return published_base() + self.folder + file_name

    @property
    def files(self) -> Tuple[str, str]:
        """The biLM's two files: options and weights."""
        return (self.options_name, self.weights_name)

    @property
    def head_files(self) -> Tuple[str, ...]:
        """The LM head's two files (softmax HDF5, vocabulary), or none."""
        return tuple(self.lm_head or ())

    @property
    def options_url(self) -> str:
        return self.url(self.options_name)

    @property
    def weights_url(self) -> str:
        return self.url(self.weights_name)

    @property
    def cache_dir(self) -> Path:
        """The cache folder of this model (it holds the files under their published names)."""
        return cache_root() / self.name

    @property
    def config(self) -> BiLMConfig:
        """The biLM's architecture, known from its shape (nothing is read or downloaded)."""
        return BiLMConfig.from_options(shape_options(self.shape), source=self.name)


ModelRef = Union[str, PublishedModel]  # what an entry point takes: a published model's name, or its record


def _allennlp(name: str, shape: str, about: str, reported: str, lm_head: Optional[Tuple[str, str]] = None) -> PublishedModel:
    return PublishedModel(
        name,
        shape.replace("_5.5B", ""),
        f"models/elmo/{shape}/",
        f"elmo_{shape}_options.json",
        f"elmo_{shape}_weights.hdf5",
        about,
        reported,
        lm_head,
    )


PUBLISHED: Dict[str, PublishedModel] = {
    m.name: m
    for m in (
        _allennlp("elmo-small", "2x1024_128_2048cnn_1xhighway", "1B Word Benchmark", "SRL F1 83.62, constituency F1 93.12"),
        _allennlp("elmo-medium", "2x2048_256_2048cnn_1xhighway", "1B Word Benchmark", "SRL F1 84.04, constituency F1 93.60"),
        _allennlp(
            "elmo-original",
            "2x4096_512_2048cnn_2xhighway",
            "1B Word Benchmark",
            "SRL F1 84.63, constituency F1 93.85",
            # the files AllenNLP's perplexity command reads: softmax/W [793471, 512], softmax/b [793471]
            ("elmo_2x4096_512_2048cnn_2xhighway_softmax_weights.hdf5", "vocab-2016-09-10.txt"),
        ),
        _allennlp(
            "elmo-original-5.5b",
            "2x4096_512_2048cnn_2xhighway_5.5B",
            "Wikipedia + WMT news 2008-2012, 5.5B tokens",
            "SRL F1 84.93, constituency F1 94.01",
        ),
        PublishedModel(
            "elmo-pubmed",
            "2x4096_512_2048cnn_2xhighway",
            "models/elmo/contributed/pubmed/",
            "elmo_2x4096_512_2048cnn_2xhighway_options.json",
            "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5",
            "PubMed abstracts (contributed)",
            "no task figures published with it",
        ),
    )
}


# ---------------------------------------------------------------------------------------------
# settings


def published_base() -> str:
    """``SPACY_ELMO_MIRROR`` (with a trailing slash) or the published location."""
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    if not mirror:
        return PUBLISHED_BASE
    return mirror if mirror.endswith("/") else mirror + "/"


def model_dir(model: ModelRef) -> Path:
    """Cache folder of a published model (it holds the two files under their published names)."""
    return published_model(model).cache_dir


def published_model(model: ModelRef) -> PublishedModel:
    """The registry entry of a name (a record is returned as it is), or a one-line error listing the names."""
    if isinstance(model, PublishedModel):
        return model
    if model not in PUBLISHED:
        raise WeightsError(f"unknown ELMo model name {model!r}: use one of {', '.join(PUBLISHED)}, en_default, or a folder")
    return PUBLISHED[model]


# ---------------------------------------------------------------------------------------------
# shapes


def shape_options(shape: str) -> Dict[str, Any]:
    """options.json of a published shape ``{layers}x{cell}_{proj}_2048cnn_{k}xhighway``."""
    match = re.fullmatch(r"(\d+)x(\d+)_(\d+)_2048cnn_(\d+)xhighway", shape)
    if match is None:
        raise WeightsError(f"not a published ELMo shape: {shape!r}")
    layers, cell, proj, highway = (int(g) for g in match.groups())
    filters = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
    return {
        "lstm": {"use_skip_connections": True, "projection_dim": proj, "cell_clip": 3, "proj_clip": 3, "dim": cell, "n_layers": layers},
        "char_cnn": {
            "activation": "relu",
            "filters": filters,
            "n_highway": highway,
            "embedding": {"dim": 16},
            "n_characters": 262,
            "max_characters_per_token": 50,
        },
    }


def parameter_count(shape: str) -> int:
    """Parameters of the biLM (char CNN + LSTMs, no softmax) for a published shape."""
    config = BiLMConfig.from_options(shape_options(shape), source=shape)
    total = 0
    for dims in hdf5_datasets(config).values():
        count = 1
        for d in dims:
            count *= d
        total += count
    return total


# ---------------------------------------------------------------------------------------------
# redirects


REDIRECT_ENV = "SPACY_ELMO_ALLOW_REDIRECT"


def redirect_origins() -> Tuple[str, ...]:
    """Origins (``scheme://host[:port]``) a download may be redirected to besides its own, from
    ``SPACY_ELMO_ALLOW_REDIRECT`` (comma-separated; empty by default)."""
    value = os.environ.get(REDIRECT_ENV, "")
    return tuple(origin(item.strip()) for item in value.split(",") if item.strip())


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lower-cased, with the scheme's default port left out."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    port = parts.port
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"
