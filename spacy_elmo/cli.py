"""Command line: ``python -m spacy_elmo COMMAND ...``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from .bilm.weights import WeightsError, load_original, save_native


def _convert(args: argparse.Namespace) -> int:
    model = load_original(args.options, args.weights)
    out = save_native(model, args.out_dir)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"wrote {out} ({n_params:,} parameters, {model.n_output_layers} layers of width {model.output_dim})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spacy_elmo", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("convert", help="original options.json + weights.hdf5 -> spacy-elmo model directory")
    convert.add_argument("options", type=Path, help="options.json of the original model")
    convert.add_argument("weights", type=Path, help="the .hdf5 weights file")
    convert.add_argument("out_dir", type=Path, help="directory to write (config.json + weights.pt)")
    convert.set_defaults(func=_convert)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except WeightsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
