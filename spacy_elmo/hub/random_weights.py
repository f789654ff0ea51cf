"""Random ELMo weights in the published layout (``options.json`` + ``weights.hdf5``), seeded.

For what needs a biLM of a given shape without downloading one: benchmarks and parity checks
against another implementation, tests, and trying a mirror (:func:`write_mirror` lays the files
out under the published folder and file names, so that ``SPACY_ELMO_MIRROR`` can point at a
server of that folder). The values are random but not arbitrary: their scales keep each layer's
activations in a trained model's range (unit-order char-CNN outputs, a highway that mostly
carries, LSTM cells that reach the clips now and then), so that speed and numerical comparisons
see realistic numbers. The same spec and seed give the same files, byte for byte.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import numpy as np

from ..bilm.errors import WeightsError
from ..bilm.layout import hdf5_datasets, lstm_prefix, read_options
from ..bilm.model import BiLMConfig, OptionsError
from .published import PUBLISHED, names_hint, shape_options

OPTIONS_NAME, WEIGHTS_NAME = "options.json", "weights.hdf5"

# scales (standard deviations relative to 1/sqrt(fan_in)), chosen so that activations stay in a
# trained model's range; see the module docstring
CNN_GAIN = 1.5  # char embeddings are uniform(-1, 1) (variance 1/3): conv outputs of std ~0.9
CNN_BIAS_MEAN = -0.8  # max-pooling over 50 positions lifts the mean: a negative bias keeps relu units sparse
CARRY_BIAS_MEAN = -1.5  # the highway's carry gate starts mostly closed (the input passes through)
LSTM_GAIN = 1.4
FORGET_BIAS_MEAN = -0.5  # stored value; readers add +1 to the forget gate's bias
PROJECTION_GAIN = 3.0  # cell outputs of std ~0.3 -> projections of std ~1, over the clip at times


def options_for(spec: str) -> Dict[str, Any]:
    """The options of ``spec``: a published model's name (``elmo-small``), a published shape
    (``2x1024_128_2048cnn_1xhighway``), or the path of an ``options.json``."""
    if spec in PUBLISHED:
        return shape_options(_known_shape(spec))
    path = Path(spec)
    if path.suffix == ".json" or path.is_file():
        return read_options(path)
    try:
        return shape_options(spec.replace("_5.5B", ""))
    except WeightsError:
        raise WeightsError(
            f"{spec!r} is neither a published model ({names_hint()}), a published shape such as "
            "2x1024_128_2048cnn_1xhighway, nor an options.json file"
        ) from None


def _known_shape(name: str) -> str:
    """The shape of the published AllenNLP-format model ``name`` (one-line error for the others)."""
    model = PUBLISHED[name]
    if model.archive:
        raise WeightsError(f"{name} is an ELMoForManyLangs model: write random ones with spacy_elmo.hub.efml_random.write_random_efml")
    if model.shape is None:
        raise WeightsError(f"{name}: its publisher states no shape; give a shape or an options.json instead")
    return model.shape


def _config(options: Dict[str, Any], source: str) -> BiLMConfig:
    try:
        return BiLMConfig.from_options(options, source=source)
    except OptionsError as err:
        raise WeightsError(str(err)) from None


def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise ImportError("writing weights in the original .hdf5 format needs h5py: pip install 'spacy-elmo[hdf5]'") from None
    return h5py


def random_arrays(config: BiLMConfig, seed: int = 0) -> Dict[str, np.ndarray]:
    """Every dataset of the published layout for ``config``, float32, drawn from ``seed``."""
    rng = np.random.default_rng(seed)

    def normal(shape: Tuple[int, ...], std: float, mean: float = 0.0) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)).astype(np.float32)

    relu = config.activation == "relu"
    n_filters, proj, cell = config.n_filters, config.projection_dim, config.lstm_dim
    makers: Dict[str, Callable[[Tuple[int, ...]], np.ndarray]] = {}
    makers["char_embed"] = lambda shape: rng.uniform(-1.0, 1.0, shape).astype(np.float32)
    for i, (width, _count) in enumerate(config.filters):
        fan_in = width * config.char_dim
        makers[f"CNN/W_cnn_{i}"] = functools.partial(normal, std=CNN_GAIN / math.sqrt(fan_in))
        makers[f"CNN/b_cnn_{i}"] = lambda shape: normal(shape, 0.3, CNN_BIAS_MEAN if relu else 0.0)
    for k in range(config.n_highway):
        makers[f"CNN_high_{k}/W_transform"] = lambda shape: normal(shape, 1.0 / math.sqrt(n_filters))
        makers[f"CNN_high_{k}/b_transform"] = lambda shape: normal(shape, 0.1)
        makers[f"CNN_high_{k}/W_carry"] = lambda shape: normal(shape, 0.7 / math.sqrt(n_filters))
        makers[f"CNN_high_{k}/b_carry"] = lambda shape: normal(shape, 0.5, CARRY_BIAS_MEAN)
    makers["CNN_proj/W_proj"] = lambda shape: normal(shape, 1.0 / math.sqrt(n_filters))
    makers["CNN_proj/b_proj"] = lambda shape: normal(shape, 0.1)
    for layer in range(config.n_layers):
        for direction in (0, 1):
            prefix = lstm_prefix(direction, layer)
            makers[f"{prefix}/W_0"] = lambda shape: normal(shape, LSTM_GAIN / math.sqrt(2 * proj))

            def bias(shape: Tuple[int, ...]) -> np.ndarray:
                b = normal(shape, 0.5)  # gates i, j, f, o (TensorFlow's order)
                b[2 * cell : 3 * cell] += np.float32(FORGET_BIAS_MEAN)
                return b

            makers[f"{prefix}/B"] = bias
            makers[f"{prefix}/W_P_0"] = lambda shape: normal(shape, PROJECTION_GAIN / math.sqrt(cell))
    return {name: makers[name](shape) for name, shape in hdf5_datasets(config).items()}


def write_random_weights(
    spec: str, out_dir: Path, seed: int = 0, options_name: str = OPTIONS_NAME, weights_name: str = WEIGHTS_NAME
) -> Tuple[Path, Path]:
    """Write ``options_name`` and ``weights_name`` (random values from ``seed``) into ``out_dir``
    for the shape of ``spec`` (see :func:`options_for`); returns the two paths."""
    options = options_for(spec)
    config = _config(options, source=spec)
    h5py = _h5py()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    options_path, weights_path = out_dir / options_name, out_dir / weights_name
    options_path.write_text(json.dumps(options, indent=2) + "\n", encoding="utf-8")
    tmp = weights_path.with_name(weights_path.name + ".tmp")
    # track_times=False: no timestamps inside the file, so the same seed gives the same bytes
    with h5py.File(tmp, "w", track_order=True) as handle:
        for name, values in random_arrays(config, seed).items():
            handle.create_dataset(name, data=values, track_times=False)
    tmp.replace(weights_path)
    return options_path, weights_path


def write_mirror(name: str, root: Path, seed: int = 0) -> Tuple[Path, Path]:
    """Random files of the published model ``name`` under ``root`` in the published layout
    (``models/elmo/<shape>/<published file names>``): serve ``root`` over HTTP and set
    ``SPACY_ELMO_MIRROR`` to its address to try a mirror without the real files."""
    if name not in PUBLISHED:
        raise WeightsError(f"--mirror needs a published model name ({names_hint()}), got {name!r}")
    _known_shape(name)
    model = PUBLISHED[name]
    return write_random_weights(name, Path(root) / model.mirror_path, seed, model.options_name, model.weights_name)
