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


def _embed(args: argparse.Namespace) -> int:
    import numpy as np
    import spacy

    text = args.text if args.text is not None else sys.stdin.read()
    nlp = spacy.blank(args.lang)
    config = {"mix": args.mix}
    if args.weights is not None:
        config["weights"] = str(args.weights)
    nlp.add_pipe("elmo", config=config)
    doc = nlp(text)
    print(f"{len(doc)} tokens, ELMo vectors {doc.tensor.shape}, biLM layers {doc._.elmo_layers.shape}")
    seen: dict = {}
    for token in doc:
        if token.is_space:
            continue
        line = f"{token.i:>5}  {token.text[:20]:<20} |v|={np.linalg.norm(token._.elmo):7.3f}"
        first = seen.setdefault(token.lower_, token)
        if first is not token:
            line += f"  cos(with token {first.i}, same word)={token.similarity(first):.3f}"
        print(line)
    if args.output is not None:
        np.savez(args.output, vectors=doc.tensor, layers=doc._.elmo_layers, tokens=np.array([t.text for t in doc]))
        print(f"wrote {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spacy_elmo", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("convert", help="original options.json + weights.hdf5 -> spacy-elmo model directory")
    convert.add_argument("options", type=Path, help="options.json of the original model")
    convert.add_argument("weights", type=Path, help="the .hdf5 weights file")
    convert.add_argument("out_dir", type=Path, help="directory to write (config.json + weights.pt)")
    convert.set_defaults(func=_convert)
    embed = commands.add_parser("embed", help="run the elmo component over a text and summarise the vectors")
    embed.add_argument("text", nargs="?", help="text to embed (default: standard input)")
    embed.add_argument("--weights", type=Path, help="model directory (spacy-elmo or options.json + .hdf5)")
    embed.add_argument("--mix", default="average", help="'average', 'top' or 'layer:N'")
    embed.add_argument("--lang", default="en", help="spaCy language of the tokenizer")
    embed.add_argument("--output", type=Path, help="also write vectors, layers and tokens to this .npz")
    embed.set_defaults(func=_embed)
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
