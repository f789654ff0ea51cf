"""Command line: ``python -m spacy_elmo COMMAND ...``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

from .bilm.weights import WeightsError, load_original, save_native

if TYPE_CHECKING:
    from .training.trainer import TrainConfig


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


def _prepare(args: argparse.Namespace) -> int:
    from .training.corpus import prepare_corpus

    stats = prepare_corpus(
        args.inputs, args.out_dir, lang=args.lang, min_count=args.min_count, max_vocab=args.max_vocab,
        shard_size=args.shard_size, max_files=args.max_files,
    )
    for split, s in stats.items():
        print(f"{split:>5}: {s.files} files, {s.sentences:,} sentences, {s.tokens:,} tokens, {s.skipped_lines} bad lines skipped")
    return 0


def _train_config(args: argparse.Namespace, init_model: Optional[Path]) -> "TrainConfig":
    import srsly

    from .training.trainer import TrainConfig

    values = dict(srsly.read_json(args.config)) if args.config else {}
    values.update(data_dir=str(args.data_dir), out_dir=str(args.out_dir))
    if init_model is not None:
        values["init_model"] = str(init_model)
    for key in ("max_steps", "max_minutes", "lr", "threads", "max_tokens", "seed", "eval_every", "checkpoint_every", "warmup_steps"):
        value = getattr(args, key, None)
        if value is not None:
            values[key] = value
    return TrainConfig(**values)


def _pretrain(args: argparse.Namespace) -> int:
    from .training.trainer import train

    result = train(_train_config(args, None), resume=args.resume, dump_weights=args.dump_weights)
    _print_result(result)
    return 0


def _finetune(args: argparse.Namespace) -> int:
    from .training.trainer import train

    result = train(_train_config(args, args.model), resume=args.resume, dump_weights=args.dump_weights)
    _print_result(result)
    return 0


def _print_result(result: dict) -> None:
    import os

    if os.environ.get("RANK", "0") == "0":  # one line, from the first process of a torchrun job
        print(json.dumps(result))


def _evaluate(args: argparse.Namespace) -> int:
    import srsly

    from .training.baseline import unigram_perplexity
    from .training.trainer import load_language_model, perplexity

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model, vocab = load_language_model(args.model)
    result = {"model": str(args.model), "data": str(args.data_dir), "split": args.split}
    result.update(perplexity(model, vocab, args.data_dir, args.split, max_tokens=args.max_tokens, limit=args.limit))
    result["unigram_ppl"] = unigram_perplexity(vocab, args.data_dir, args.split, limit=args.limit)
    print(f"{args.split} perplexity: forward {result['ppl_fwd']:.2f}, backward {result['ppl_bwd']:.2f}, "
          f"average {result['ppl_avg']:.2f} over {result['tokens']:,} predictions (unigram baseline {result['unigram_ppl']:.1f})")
    if args.output:
        srsly.write_json(args.output, result)
    return 0


def _export(args: argparse.Namespace) -> int:
    from .bilm import load_bilm, save_original

    options, weights = save_original(load_bilm(args.model), args.out_dir)
    print(f"wrote {options} and {weights}")
    return 0


def _package(args: argparse.Namespace) -> int:
    import spacy

    nlp = spacy.blank(args.lang)
    nlp.add_pipe("elmo", config={"weights": str(args.model)})
    nlp.initialize()
    nlp.meta["name"] = args.name
    nlp.meta["description"] = f"ELMo vectors from the biLM in {args.model.name} (spacy-elmo)"
    nlp.to_disk(args.out_dir)
    doc = spacy.load(args.out_dir)("A quick check .")
    print(f"wrote {args.out_dir}: spacy.load() gives ELMo vectors of shape {doc.tensor.shape}")
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

    prepare = commands.add_parser("prepare", help="tokenize text into sentence shards + vocabulary")
    prepare.add_argument("inputs", type=Path, nargs="+", help="text files or folders (.txt/.gz; a folder's manifest.tsv gives splits)")
    prepare.add_argument("--out-dir", type=Path, required=True)
    prepare.add_argument("--lang", default="en")
    prepare.add_argument("--min-count", type=int, default=1)
    prepare.add_argument("--max-vocab", type=int)
    prepare.add_argument("--shard-size", type=int, default=100_000, help="sentences per shard")
    prepare.add_argument("--max-files", type=int, help="use only the first N files of each split (quick runs)")
    prepare.set_defaults(func=_prepare)

    for name, helptext in (("pretrain", "train a biLM from scratch"), ("finetune", "continue the LM objective from a biLM on in-domain text")):
        sub = commands.add_parser(name, help=helptext)
        if name == "finetune":
            sub.add_argument("model", type=Path, help="biLM to start from: a spacy-elmo model dir, or options.json + .hdf5 dir")
        sub.add_argument("data_dir", type=Path, help="output of `prepare`")
        sub.add_argument("out_dir", type=Path)
        sub.add_argument("--config", type=Path, help="JSON with TrainConfig fields")
        sub.add_argument("--resume", action="store_true", help="continue from OUT_DIR/checkpoints/last.pt")
        sub.add_argument("--max-steps", type=int)
        sub.add_argument("--max-minutes", type=float)
        sub.add_argument("--lr", type=float)
        sub.add_argument("--warmup-steps", type=int)
        sub.add_argument("--threads", type=int)
        sub.add_argument("--max-tokens", type=int)
        sub.add_argument("--seed", type=int)
        sub.add_argument("--eval-every", type=int)
        sub.add_argument("--checkpoint-every", type=int)
        sub.add_argument("--dump-weights", type=Path, help=argparse.SUPPRESS)
        sub.set_defaults(func=_pretrain if name == "pretrain" else _finetune)

    evaluate = commands.add_parser("evaluate", help="held-out perplexity (forward, backward, average) of a trained biLM")
    evaluate.add_argument("model", type=Path)
    evaluate.add_argument("data_dir", type=Path)
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument("--limit", type=int, default=0, help="first N sentences only")
    evaluate.add_argument("--max-tokens", type=int, default=4096)
    evaluate.add_argument("--threads", type=int)
    evaluate.add_argument("--output", type=Path, help="also write the figures as JSON")
    evaluate.set_defaults(func=_evaluate)

    package = commands.add_parser("package", help="a spaCy pipeline directory with the elmo component and the biLM inside")
    package.add_argument("model", type=Path)
    package.add_argument("out_dir", type=Path)
    package.add_argument("--lang", default="en")
    package.add_argument("--name", default="elmo")
    package.set_defaults(func=_package)

    export = commands.add_parser("export", help="write a biLM in the original options.json + weights.hdf5 format")
    export.add_argument("model", type=Path)
    export.add_argument("out_dir", type=Path)
    export.set_defaults(func=_export)
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
