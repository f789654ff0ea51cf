"""Published ELMo models by name: the registry, where each one's files live, and the cache folder.

Two kinds of entry: a biLM in AllenNLP's format (an options file and an HDF5 weights file; the
English models of AllenNLP and other languages' models their authors publish in that format), and
an ELMoForManyLangs model (44 languages, one zip archive each, named ``efml-<language code>``:
:data:`EFML_LANGUAGES`). Each entry records where its publisher keeps the files (``base`` +
``folder``), the page that lists it, its language and licence as the publisher states them, and
any SHA-256 digests and sizes the publisher states (none do today; a digest is then recorded at the
first download: :mod:`.first_seen`).

``SPACY_ELMO_MIRROR`` replaces every publisher's location: a mirror holds AllenNLP's files at
their path below ``allennlp/`` (the mirror's address stands for everything up to and including
``allennlp/``), and another publisher's files at ``HOST/PATH`` below it (:attr:`PublishedModel.
mirror_path`). ``elmo-original`` also publishes its language-model head (the softmax over its
training vocabulary and that vocabulary) in the same folder: :attr:`PublishedModel.lm_head`.
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
from urllib.parse import urlsplit

from ..bilm.efml_folder import SAMPLE_CONFIGS, efml_architecture
from ..bilm.errors import WeightsError
from ..bilm.layout import hdf5_datasets
from ..bilm.model import BiLMConfig
from ..cache import CACHE_ENV, cache_root  # noqa: F401  (re-exported: where published models live)

PUBLISHED_BASE = "https://s3-us-west-2.amazonaws.com/allennlp/"
MIRROR_ENV = "SPACY_ELMO_MIRROR"
ALLENNLP_PAGE = "https://allennlp.org/elmo"
FORMAT_ALLENNLP, FORMAT_EFML, FORMAT_TRF = "allennlp", "efml", "allennlp-transformer"
NOT_STATED = "not stated by the publisher"


@dataclass(frozen=True)
class PublishedModel:
    """One published biLM: its name here, its shape, where its files live and what its publisher
    states about it (language, licence, digests, sizes)."""

    name: str
    shape: Optional[str]  # the published shape (AllenNLP), their model config's name (ELMoForManyLangs), None: not stated
    folder: str  # path below ``base``
    options_name: str  # AllenNLP format: the options file ("" for an archive)
    weights_name: str  # AllenNLP format: the HDF5 weights ("" for an archive)
    about: str
    reported: str  # the quality its authors report
    lm_head: Optional[Tuple[str, str]] = None  # (softmax HDF5, vocabulary) beside the weights, if published
    sha256: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)  # digests the publisher states, by file
    sizes: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False)  # sizes the publisher states, by file
    language: str = "en"  # ISO 639-1 code where one exists, else ISO 639-3
    licence: str = NOT_STATED
    page: str = ALLENNLP_PAGE  # where the publisher lists it
    base: str = PUBLISHED_BASE  # the publisher's location; ``folder`` is below it
    archive: str = ""  # the archive that holds the model: a zip (ELMoForManyLangs) or a .tar.gz (AllenNLP's transformer ELMo)
    redirects: Tuple[str, ...] = ()  # origins its publisher's location redirects to (followed besides its own)

    def url(self, file_name: str) -> str:
        """Where ``file_name`` is downloaded from: the mirror when ``SPACY_ELMO_MIRROR`` is set, else the publisher."""
        mirror = mirror_base()
        return (mirror + self.mirror_path if mirror else self.base + self.folder) + file_name

    @property
    def mirror_path(self) -> str:
        """The folder of this model's files below a mirror's address: AllenNLP's path below
        ``allennlp/`` for AllenNLP's own files, ``HOST/PATH/`` for another publisher's."""
        if self.base == PUBLISHED_BASE:
            return self.folder
        parts = urlsplit(self.base)
        return parts.netloc + parts.path + self.folder

    @property
    def format(self) -> str:
        """``allennlp`` (an options file and an HDF5 file), ``efml`` (an ELMoForManyLangs zip archive)
        or ``allennlp-transformer`` (AllenNLP's transformer ELMo, a ``.tar.gz`` archive)."""
        if not self.archive:
            return FORMAT_ALLENNLP
        return FORMAT_TRF if self.archive.endswith(".tar.gz") else FORMAT_EFML

    @property
    def files(self) -> Tuple[str, ...]:
        """The files to download: the options and weights, or the one archive."""
        return (self.archive,) if self.archive else (self.options_name, self.weights_name)

    @property
    def download_size(self) -> Optional[int]:
        """Bytes of :attr:`files` as the publisher states them, or None when it states them not all."""
        sizes = [self.sizes.get(f) for f in self.files]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

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
    def lock_file(self) -> Path:
        """The lock that one download, or one conversion, of this model holds."""
        return cache_root() / f".{self.name}.lock"

    @property
    def shape_known(self) -> bool:
        """Whether the architecture is known by name (else it is read from the options once downloaded)."""
        return self.shape is not None

    @property
    def config(self) -> BiLMConfig:
        """The biLM's architecture, known from its shape (nothing is read or downloaded); a one-line
        error when the publisher states no shape (see :func:`.download.published_config`)."""
        if self.shape is None:
            raise WeightsError(f"{self.name}: its publisher states no shape; it is read from its options file once downloaded")
        if self.archive:
            return efml_architecture(SAMPLE_CONFIGS[self.shape + ".json"], f"{self.name} ({self.shape})")
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


NLPL_BASE = "http://vectors.nlpl.eu/repository/"
EFML_PAGE = "https://github.com/HIT-SCIR/ELMoForManyLangs"
EFML_SHAPE = "cnn_50_100_512_4096_sample"  # the model config every published ELMoForManyLangs model names
EFML_LICENCE = "not stated by the authors (their README names none; the code of their elmoformanylangs package is MIT)"
# (code, their name of the language, number in the NLPL repository's release 1.1), as their README
# lists them; ISO 639-1 codes, ISO 639-3 where a language has none (grc)
EFML_LANGUAGES: Tuple[Tuple[str, str, int], ...] = (
    ("ar", "Arabic", 136),
    ("bg", "Bulgarian", 137),
    ("ca", "Catalan", 138),
    ("cs", "Czech", 139),
    ("cu", "Old Church Slavonic", 140),
    ("da", "Danish", 141),
    ("de", "German", 142),
    ("el", "Greek", 143),
    ("en", "English", 144),
    ("es", "Spanish", 145),
    ("et", "Estonian", 146),
    ("eu", "Basque", 147),
    ("fa", "Persian", 148),
    ("fi", "Finnish", 149),
    ("fr", "French", 150),
    ("ga", "Irish", 151),
    ("gl", "Galician", 152),
    ("grc", "Ancient Greek", 153),
    ("he", "Hebrew", 154),
    ("hi", "Hindi", 155),
    ("hr", "Croatian", 156),
    ("hu", "Hungarian", 157),
    ("id", "Indonesian", 158),
    ("it", "Italian", 159),
    ("ja", "Japanese", 160),
    ("ko", "Korean", 161),
    ("la", "Latin", 162),
    ("lv", "Latvian", 163),
    ("nl", "Dutch", 164),
    ("nb", "Norwegian Bokmål", 165),
    ("nn", "Norwegian Nynorsk", 166),
    ("pl", "Polish", 167),
    ("pt", "Portuguese", 168),
    ("ro", "Romanian", 169),
    ("ru", "Russian", 170),
    ("sk", "Slovak", 171),
    ("sl", "Slovene", 172),
    ("sv", "Swedish", 173),
    ("tr", "Turkish", 174),
    ("ug", "Uyghur", 175),
    ("uk", "Ukrainian", 176),
    ("ur", "Urdu", 177),
    ("vi", "Vietnamese", 178),
    ("zh", "Chinese (traditional script)", 179),
)
EFML_PREFIX = "efml-"


def _efml(code: str, language: str, number: int) -> PublishedModel:
    return PublishedModel(
        EFML_PREFIX + code,
        EFML_SHAPE,
        "11/",
        "",
        "",
        f"{language}: 20M words sampled from the CoNLL 2018 shared task's raw text (Wikipedia + Common Crawl)",
        "no figures per model (their CoNLL 2018 UD parsing system used them)",
        language=code,
        licence=EFML_LICENCE,
        page=EFML_PAGE,
        base=NLPL_BASE,
        archive=f"{number}.zip",
        redirects=("https://vectors.nlpl.eu",),  # the same host over https
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
        PublishedModel(
            "elmo-pt-contributed",
            None,  # the page states no shape: read from the options file
            "models/elmo/contributed/pt/",
            "elmo_pt_options.json",
            "elmo_pt_weights.hdf5",
            "Portuguese (contributed to AllenNLP)",
            "no task figures published with it",
            language="pt",
        ),
        PublishedModel(
            "elmo-ja-exawizards",
            None,
            "data/",
            "options.json",
            "weights.hdf5",
            "Japanese (ExaWizards; listed on AllenNLP's ELMo page)",
            "no task figures published with it",
            language="ja",
            base="https://exawizardsallenlp.blob.core.windows.net/",
        ),
        PublishedModel(
            "elmo-transformer",
            None,  # its page states no shape: read from the archive's configuration once downloaded
            "models/",
            "",
            "",
            "1B Word Benchmark; a 6-layer Transformer biLM (Peters et al. 2018, Dissecting Contextual Word Embeddings)",
            "no task figures published with it",
            archive="transformer-elmo-2019.01.10.tar.gz",
        ),
        *(_efml(*entry) for entry in EFML_LANGUAGES),
    )
}


# ---------------------------------------------------------------------------------------------
# settings


def mirror_base() -> str:
    """``SPACY_ELMO_MIRROR`` with a trailing slash, or "" when unset."""
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    if not mirror:
        return ""
    return mirror if mirror.endswith("/") else mirror + "/"


def published_base() -> str:
    """``SPACY_ELMO_MIRROR`` (with a trailing slash) or AllenNLP's published location."""
    return mirror_base() or PUBLISHED_BASE


def names_hint() -> str:
    """The published names in one short line (the ELMoForManyLangs ones by their pattern)."""
    others = [n for n in PUBLISHED if not n.startswith(EFML_PREFIX)]
    codes = [n[len(EFML_PREFIX) :] for n in PUBLISHED if n.startswith(EFML_PREFIX)]
    return ", ".join(others) + (f", {EFML_PREFIX}<language> ({len(codes)} languages: {', '.join(codes)})" if codes else "")


def model_dir(model: ModelRef) -> Path:
    """Cache folder of a published model (it holds the two files under their published names)."""
    return published_model(model).cache_dir


def published_model(model: ModelRef) -> PublishedModel:
    """The registry entry of a name (a record is returned as it is), or a one-line error listing the names."""
    if isinstance(model, PublishedModel):
        return model
    if model not in PUBLISHED:
        raise WeightsError(f"unknown ELMo model name {model!r}: use one of {names_hint()}, en_default, or a folder")
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


def model_parameters(model: PublishedModel) -> Optional[int]:
    """Parameters of a published AllenNLP-format biLM known by its shape; None for the others (an
    ELMoForManyLangs model's count depends on its lexicons; some publishers state no shape)."""
    return parameter_count(model.shape) if model.shape is not None and not model.archive else None


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
