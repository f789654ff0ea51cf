#!/usr/bin/env python3
"""The reference implementations, each run in a virtualenv of its own (recipes: docs/benchmarks.md for
AllenNLP 2.10.1, docs/models.md for ELMoForManyLangs), and the helpers the scripts call them with.
Run in the reference's virtualenv, this file imports nothing from spacy-elmo (only the harness, for
its clock and peak memory):

    REF_VENV/bin/python bench/reference.py allennlp --options O.json --weights W.hdf5 --input LINES.txt --out OUT.npz
    REF_VENV/bin/python bench/reference.py efml --model FOLDER --input SENTENCES.json --out OUT.npz --double
    REF_VENV/bin/python bench/reference.py trf --archive ARCHIVE --input LINES.txt --bench

``allennlp``: AllenNLP's ``_ElmoBiLm`` (its character encoder and LSTMs with projection) on the
whitespace-split lines of ``--input`` in file order (blank lines give zero tokens), the sentence
boundaries removed; ``--out``: key ``str(i)`` holds line i's ``[n_layers + 1, n_tokens, 2 * projection_dim]``.
torchvision is stood in for when missing (AllenNLP imports it in modules ELMo never uses).
``trf``: allennlp-models 2.10.1's ``BidirectionalLanguageModelTokenEmbedder`` (the transformer ELMo;
its default mix per line, ``[n_tokens, 2 * width]``). ``efml``: their ``Embedder.sents2elmo`` (the entry point their documentation gives) on a JSON list
of token lists; ``--out``: ``all/i`` holds sentence i's ``output_layer=-2`` array ``[L+1, n, 2P]``,
``avg/i`` its ``output_layer=-1`` array ``[n, 2P]`` (not with ``--stateful``, nor for an empty
sentence, where their average divides by zero).

Both run ``--batch-size`` sentences a call in input order, the LSTM state zeroed before each call
(``--stateful`` carries it, their default), in float32 or, with ``--double``, float64 (the model cast
with ``.double()``). ``--bench`` times the whole input after a warm-up call (``efml``: in one call,
their sorting and batching) and prints ``ref tokens_per_s=... sentences=... tokens=... seconds=...
batch_size=... threads=... peak_rss_mb=...``.
"""
from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import logging
import subprocess
import sys
import types
import warnings
from typing import Any, Callable, Dict, List, Sequence

from bench_common import peak_rss_mb, timed

# ------------------------------------------------------------------------------ the callers' side


def run(python: str, package: str, *args: Any, **kwargs: Any) -> str:
    """This script run by ``python`` (a reference's virtualenv) on ``package``: its stdout; raises with its stderr."""
    cmd = [python, __file__, package, *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-4000:]}")
    return out.stdout


def speed(stdout: str) -> Dict[str, float]:
    """The figures of the ``ref ...`` line ``--bench`` prints."""
    line = next(line for line in stdout.splitlines() if line.startswith("ref "))
    return {key: float(value) for key, value in (item.split("=") for item in line.split()[1:])}


def version(python: str, distribution: str) -> str:
    """The version of ``distribution`` installed in ``python``'s environment ("unknown" if it has no metadata)."""
    code = f"import importlib.metadata as m; print(m.version({distribution!r}))"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


# -------------------------------------------------------------------------- the reference's side


def batches(n: int, size: int, keep: Callable[[int], bool] = lambda i: True) -> List[List[int]]:
    rows = [i for i in range(n) if keep(i)]
    return [rows[k : k + size] for k in range(0, len(rows), size)]


def allennlp(args: argparse.Namespace) -> Dict[str, Any]:
    """AllenNLP's biLM on the lines of ``--input``: what :func:`main` runs (see the module docstring)."""
    _stand_in_torchvision()
    import numpy as np
    import torch
    from allennlp.modules.elmo import _ElmoBiLm, batch_to_ids
    from allennlp.nn.util import remove_sentence_boundaries

    with open(args.input, encoding="utf-8") as handle:
        lines = [line.rstrip("\r").split() for line in handle.read().split("\n")]
    if lines and not lines[-1]:
        lines.pop()  # the final newline
    bilm = _ElmoBiLm(args.options, args.weights).eval()
    bilm = bilm.double() if args.double else bilm
    groups = batches(len(lines), args.batch_size, lambda i: bool(lines[i]))

    def call(batch: List[int], keep: bool = True) -> Dict[str, Any]:
        if not args.stateful:
            bilm._elmo_lstm.reset_states()
        out = bilm(batch_to_ids([lines[i] for i in batch]))
        layers = torch.stack([remove_sentence_boundaries(a, out["mask"])[0] for a in out["activations"]], 1)
        return {str(i): layers[j, :, : len(lines[i])].numpy() for j, i in enumerate(batch)} if keep else {}

    def arrays() -> Dict[str, Any]:
        with open(args.options, encoding="utf-8") as handle:
            lstm = json.load(handle)["lstm"]
        empty = np.zeros((lstm["n_layers"] + 1, 0, 2 * lstm["projection_dim"]))
        return {str(i): empty for i, words in enumerate(lines) if not words} | {k: v for g in groups for k, v in call(g).items()}

    return {"reset": bilm._elmo_lstm.reset_states, "arrays": arrays, "warm": lambda: call(groups[0]), "all": lambda: [call(g, keep=False) for g in groups],
            "sentences": sum(map(len, groups)), "tokens": sum(map(len, lines)), "context": torch.inference_mode}


def _stand_in_torchvision() -> None:
    """Empty modules for torchvision, which AllenNLP imports in modules ELMo never uses."""
    if importlib.util.find_spec("torchvision") is None:
        for name in ("torchvision", "torchvision.ops", "torchvision.ops.boxes"):
            stand_in = types.ModuleType(name)
            stand_in.__spec__ = importlib.machinery.ModuleSpec(name, None)  # newer transformers ask find_spec about it
            sys.modules.setdefault(name, stand_in)


def trf(args: argparse.Namespace) -> Dict[str, Any]:
    """allennlp-models' ``BidirectionalLanguageModelTokenEmbedder`` (the transformer ELMo) on the lines of
    ``--input``: each batch indexed by their ``ELMoTokenCharactersIndexer`` and embedded (their default
    mix, boundaries removed); ``--out``: key ``str(i)`` holds line i's ``[n_tokens, 2 * width]``."""
    _stand_in_torchvision()
    import torch
    from allennlp.data import Token, Vocabulary
    from allennlp.data.token_indexers import ELMoTokenCharactersIndexer
    from allennlp_models.lm.modules.token_embedders.bidirectional_lm import BidirectionalLanguageModelTokenEmbedder

    with open(args.input, encoding="utf-8") as handle:
        lines = [line.rstrip("\r").split() for line in handle.read().split("\n")]
    if lines and not lines[-1]:
        lines.pop()
    embedder = BidirectionalLanguageModelTokenEmbedder(args.archive).eval()
    embedder = embedder.double() if args.double else embedder
    indexer, vocab = ELMoTokenCharactersIndexer(), Vocabulary()
    groups = batches(len(lines), args.batch_size, lambda i: bool(lines[i]))

    def call(batch: List[int], keep: bool = True) -> Dict[str, Any]:
        rows = [indexer.tokens_to_indices([Token(t) for t in lines[i]], vocab)["elmo_tokens"] for i in batch]
        ids = torch.zeros(len(rows), max(map(len, rows)), 50, dtype=torch.long)
        for b, row in enumerate(rows):
            ids[b, : len(row)] = torch.tensor(row)
        out = embedder(ids)
        return {str(i): out[j, : len(lines[i])].numpy() for j, i in enumerate(batch)} if keep else {}

    return {"reset": lambda: None, "arrays": lambda: {k: v for g in groups for k, v in call(g).items()}, "warm": lambda: call(groups[0]),
            "all": lambda: [call(g, keep=False) for g in groups], "sentences": sum(map(len, groups)), "tokens": sum(map(len, lines)),
            "context": torch.no_grad}


def efml(args: argparse.Namespace) -> Dict[str, Any]:
    """ELMoForManyLangs' ``Embedder`` on the sentences of ``--input``: what :func:`main` runs (see the module docstring)."""
    logging.getLogger("elmoformanylangs").setLevel(logging.WARNING)
    import torch
    from elmoformanylangs import Embedder

    with open(args.input, encoding="utf-8") as handle:
        sentences = json.load(handle)
    embedder = Embedder(args.model, batch_size=args.batch_size)
    if args.double:
        embedder.model.double()
    encoder = embedder.model.encoder

    def call(batch: Sequence[int], output_layer: int) -> Dict[str, Any]:
        if not args.stateful:
            encoder.reset_states()
        arrays = embedder.sents2elmo([sentences[i] for i in batch], output_layer=output_layer)
        return {f"{'all' if output_layer == -2 else 'avg'}/{i}": array for i, array in zip(batch, arrays)}

    def arrays() -> Dict[str, Any]:
        out = {k: v for g in batches(len(sentences), args.batch_size) for k, v in call(g, -2).items()}
        if not args.stateful:  # their average fails on an empty sentence (numpy divides by zero): those are left out
            out.update({k: v for g in batches(len(sentences), args.batch_size, lambda i: bool(sentences[i])) for k, v in call(g, -1).items()})
        return out

    return {"reset": encoder.reset_states, "arrays": arrays, "warm": lambda: embedder.sents2elmo(sentences[: args.batch_size], output_layer=-2),
            "all": lambda: embedder.sents2elmo(sentences, output_layer=-2), "sentences": len(sentences), "tokens": sum(map(len, sentences)),
            "context": torch.no_grad}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="package", required=True)
    a, e = sub.add_parser("allennlp", help="AllenNLP 2.10.1's _ElmoBiLm"), sub.add_parser("efml", help="ELMoForManyLangs' Embedder")
    t = sub.add_parser("trf", help="allennlp-models 2.10.1's BidirectionalLanguageModelTokenEmbedder (transformer ELMo)")
    a.add_argument("--options", required=True)
    a.add_argument("--weights", required=True)
    a.add_argument("--input", required=True, help="one whitespace-tokenized sentence per line")
    t.add_argument("--archive", required=True, help="a transformer ELMo archive (.tar.gz) or its folder")
    t.add_argument("--input", required=True, help="one whitespace-tokenized sentence per line")
    e.add_argument("--model", required=True, help="an ELMoForManyLangs model folder")
    e.add_argument("--input", required=True, help="a JSON list of sentences, each a list of tokens")
    for p in (a, e, t):
        p.add_argument("--out", help="write each sentence's outputs to this .npz")
        p.add_argument("--bench", action="store_true", help="time the whole input and print a 'ref ...' line")
        p.add_argument("--batch-size", type=int, default=64)
        p.add_argument("--threads", type=int, default=1, help="torch threads")
        p.add_argument("--double", action="store_true", help="compute and store in float64")
        p.add_argument("--stateful", action="store_true", help="carry the LSTM state from call to call (their default)")
    args = ap.parse_args(argv)
    if not (args.out or args.bench):
        ap.error("give --out, --bench or both")
    if args.batch_size < 1:
        ap.error("--batch-size must be at least 1")
    warnings.filterwarnings("ignore")
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    ref = {"allennlp": allennlp, "efml": efml, "trf": trf}[args.package](args)
    with ref["context"]():
        if args.out:
            ref["reset"]()
            dtype = np.float64 if args.double else np.float32
            np.savez(args.out, **{key: np.asarray(value).astype(dtype, copy=True) for key, value in ref["arrays"]().items()})
            print(f"wrote {args.out}: {args.package}, torch {torch.__version__}", file=sys.stderr)
        if args.bench:
            ref["reset"]()
            ref["warm"]()
            ref["reset"]()
            _, seconds = timed(ref["all"])
            print(f"ref tokens_per_s={ref['tokens'] / seconds:.1f} sentences={ref['sentences']} tokens={ref['tokens']} seconds={seconds:.3f} "
                  f"batch_size={args.batch_size} threads={torch.get_num_threads()} peak_rss_mb={peak_rss_mb():.0f}")


if __name__ == "__main__":
    main()
