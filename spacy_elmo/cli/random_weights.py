"""Command ``random-weights``: a biLM of a given shape with random values, in the published layout."""

from __future__ import annotations

from pathlib import Path

from ._util import Arg, Opt, app, msg, user_errors


@app.command("random-weights")
@user_errors
def random_weights_cli(
    # fmt: off
    shape: str = Arg(
        ..., help="A published model's name (elmo-small, ...), a published shape (2x1024_128_2048cnn_1xhighway) or an options.json file"
    ),
    out_dir: Path = Arg(..., help="Folder to write options.json and weights.hdf5 into (with --mirror: the mirror's root)"),
    seed: int = Opt(0, "--seed", help="Random seed: the same seed gives the same files"),
    mirror: bool = Opt(
        False,
        "--mirror",
        help="Write the published folder and file names under OUT_DIR (SHAPE must be a published name), to try SPACY_ELMO_MIRROR. Default: off",
    ),
    # fmt: on
) -> None:
    """Write random ELMo weights (options.json + weights.hdf5, the authors' layout; needs h5py) for tests, benchmarks and mirrors."""
    from ..hub.random_weights import write_mirror, write_random_weights

    options, weights = write_mirror(shape, out_dir, seed) if mirror else write_random_weights(shape, out_dir, seed)
    msg.good(f"wrote {options} and {weights} ({weights.stat().st_size / 1e6:.1f} MB, seed {seed})")
