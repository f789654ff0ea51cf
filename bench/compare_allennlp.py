#!/usr/bin/env python3
"""Numerical parity of spacy_elmo's biLM with AllenNLP 2.10.1's own ELMo, on random weights.

What it measures. For each weight shape in CONFIGS (the "tiny" and "small" presets and an odd
custom shape: 3 layers, tanh char-CNN, one highway, unusual clips), it writes random weights in
the original options.json + weights.hdf5 layout (``python -m spacy_elmo random-weights``), a file
of seeded sentences plus the hard lines of bench/sentences.py (literal <S>/</S>, words cut at 48
bytes between and inside UTF-8 characters, a blank line, non-ASCII, a 151-token sentence), and
runs:

  ref64   AllenNLP in float64 (``bench/allennlp_ref.py --double``): the near-exact answer;
  ref32   AllenNLP in float32;
  ours32  spacy_elmo in float32 (``load_bilm(...).embed_sentences``);
  ours64  spacy_elmo in float64 (``model.double()``; its output is cast to float32).

All runs are stateless (zero LSTM state per sentence). Per output layer (0 = char-CNN token
vector, k = biLSTM layer k) it reports max|ours32 - ref64|, max|ref32 - ref64|, their ratio
(ours error / AllenNLP error against float64; about 1 means ours in float32 is as accurate as
AllenNLP in float32), the same ratio for the mean |error| and for the median over lines of
each line's max |error| (both steadier than the max, which one chaotic token can set; the
mean is still swayed by the 151-token line), max|ours32 - ref32| and max|ours64 - ref64|
(both near-exact, so this isolates differences in the maths from float32 rounding). It checks
that both sides return the same lines with the same shapes (a blank line gives 0 tokens),
lists every line where ours64 is off ref64 by more than --tol (exit status 1 if any), and the
per-line differences of the edge-case lines.

Run from the repository root (2 CPU threads, a few minutes):

    python3 bench/compare_allennlp.py --ref-python REF_VENV/bin/python

REF_VENV is a virtualenv with AllenNLP 2.10.1 on a CPU torch, kept outside the repository; the
recipe (five commands) is in the docstring of bench/allennlp_ref.py and in docs/benchmarks.md. Prints a markdown table and writes
bench/results/compare_allennlp.json. ``--configs tiny,odd`` runs a subset.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
from bench_common import REPO, RESULTS, machine, timed, use_threads, write_results
from sentences import EDGE_CASES, synthetic  # bench/sentences.py

BENCH = REPO / "bench"
DEFAULT_JSON = RESULTS / "compare_allennlp.json"


def _options(layers: int, cell: int, proj: int, filters: List[List[int]], highway: int, char_dim: int,
             activation: str = "relu", cell_clip: float = 3, proj_clip: float = 3) -> dict:
    return {
        "lstm": {"n_layers": layers, "dim": cell, "projection_dim": proj, "cell_clip": cell_clip, "proj_clip": proj_clip,
                 "use_skip_connections": True},
        "char_cnn": {"filters": filters, "n_highway": highway, "embedding": {"dim": char_dim}, "activation": activation,
                     "n_characters": 262, "max_characters_per_token": 50},
    }


# name -> what `random-weights` reads: a published model's name, or options written to options.json
CONFIGS: Dict[str, object] = {
    # the shapes of AllenNLP's own test fixture
    "tiny": _options(2, 64, 16, [[1, 4], [2, 8], [3, 16], [4, 32], [5, 64]], 2, 4),
    "small": "elmo-small",
    # what no published model has: 3 layers, tanh char-CNN, one highway, unusual clips
    "odd": _options(3, 96, 24, [[1, 8], [3, 16], [7, 32]], 1, 8, activation="tanh", cell_clip=5, proj_clip=2),
}


def run_tool(python: str, args: Sequence[str]) -> None:
    """Run a command; raise with its stderr if it fails."""
    cmd = [python, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")


def read_lines(path: Path) -> List[str]:
    """Input lines exactly as allennlp_ref.py splits the file (on '\\n', one trailing '\\r' dropped)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def make_sentences(path: Path, n: int, seed: int) -> List[str]:
    """Seeded sentences, then bench/sentences.py's edge cases; returns all lines."""
    path.write_text("".join(line + "\n" for line in synthetic(n, seed) + EDGE_CASES), encoding="utf-8")
    return read_lines(path)


def make_weights(out_dir: Path, spec: object, seed: int) -> Path:
    """Random weights of ``spec`` (a published name or options) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(spec, dict):
        (out_dir / "spec.json").write_text(json.dumps(spec, indent=2), encoding="utf-8")
        spec = str(out_dir / "spec.json")
    run_tool(sys.executable, ["-m", "spacy_elmo", "random-weights", str(spec), str(out_dir), "--seed", str(seed)])
    return out_dir


@dataclass
class Outputs:
    """Per-line arrays ``[L+1, n, 2P]`` of one run, in input line order."""

    name: str
    arrays: List[np.ndarray]
    seconds: float


def run_ref(ref_python: str, weights_dir: Path, text: Path, out: Path, n_lines: int,
            double: bool, threads: int, batch_size: int) -> Outputs:
    """AllenNLP's ELMo through bench/allennlp_ref.py (stateless: zero state per batch)."""
    args = ["--options", str(weights_dir / "options.json"),
            "--weights", str(weights_dir / "weights.hdf5"), "--input", str(text), "--out", str(out),
            "--threads", str(threads), "--batch-size", str(batch_size)]
    if double:
        args.append("--double")
    _, seconds = timed(run_tool, ref_python, [str(BENCH / "allennlp_ref.py"), *args])
    with np.load(out) as npz:
        keys = set(npz.files)
        expected = {str(i) for i in range(n_lines)}
        if not expected <= keys:
            raise RuntimeError(f"{out}: missing lines {sorted(expected - keys, key=int)[:10]}")
        arrays = [npz[str(i)] for i in range(n_lines)]
    return Outputs("ref64" if double else "ref32", arrays, seconds)


def run_ours(weights_dir: Path, sentences: List[List[str]], double: bool, threads: int,
             batch_size: int) -> Outputs:
    """spacy_elmo's biLM in this process (float64 via model.double(); output cast to float32)."""
    from spacy_elmo import load_bilm

    use_threads(threads)
    model = load_bilm(weights_dir)
    if double:
        model.double()
    arrays, seconds = timed(model.embed_sentences, sentences, batch_size=batch_size)
    return Outputs("ours64" if double else "ours32", arrays, seconds)


def check_shapes(a: Outputs, b: Outputs, sentences: List[List[str]]) -> List[str]:
    """Problems with line counts and shapes between two runs (empty list if none)."""
    problems = []
    if len(a.arrays) != len(b.arrays) or len(a.arrays) != len(sentences):
        return [f"line counts: {a.name} {len(a.arrays)}, {b.name} {len(b.arrays)}, input {len(sentences)}"]
    for i, (x, y, s) in enumerate(zip(a.arrays, b.arrays, sentences)):
        if x.shape != y.shape or x.shape[1] != len(s):
            problems.append(f"line {i}: {a.name} {x.shape}, {b.name} {y.shape}, {len(s)} tokens")
    return problems


@dataclass
class Diff:
    """|a - b| of two runs, reduced per line and layer (computed in float64)."""

    max: np.ndarray  # [n_lines, L+1] max |a - b| (0 for empty lines)
    sum: np.ndarray  # [n_lines, L+1] sum |a - b|
    count: int  # values per layer over all lines

    def layer_max(self, k: int) -> float:
        return float(self.max[:, k].max())

    def layer_mean(self, k: int) -> float:
        return float(self.sum[:, k].sum() / max(self.count, 1))

    def layer_median(self, k: int, rows: Sequence[int]) -> float:
        """Median over the given lines of the per-line max (robust to one chaotic line)."""
        return float(np.median(self.max[list(rows), k]))

    def line_max(self) -> np.ndarray:
        return self.max.max(axis=1)


def diff(a: Outputs, b: Outputs) -> Diff:
    maxes, sums, count = [], [], 0
    for x, y in zip(a.arrays, b.arrays):
        d = np.abs(x.astype(np.float64) - y.astype(np.float64))
        maxes.append(d.max(axis=(1, 2)) if d.shape[1] else np.zeros(d.shape[0]))
        sums.append(d.sum(axis=(1, 2)))
        count += d.shape[1] * d.shape[2]
    return Diff(np.stack(maxes), np.stack(sums), count)


def layer_scale(ref: Outputs) -> np.ndarray:
    """Max |value| per layer of a run (to read the differences against)."""
    return np.max(np.stack([np.abs(x).max(axis=(1, 2)) if x.shape[1] else np.zeros(x.shape[0])
                            for x in ref.arrays]), axis=0)


def ratio(ours: float, ref: float) -> float:
    if ref > 0:
        return ours / ref
    return float("inf") if ours > 0 else 1.0


def line_report(i: int, lines: List[str], diffs: Dict[str, Optional[Diff]]) -> dict:
    """One input line with its per-layer max differences for each pair of runs."""
    text = lines[i]
    out: dict = {"line": i, "n_tokens": len(text.split()),
                 "text": text[:100] + ("..." if len(text) > 100 else "")}
    for key, d in diffs.items():
        if d is not None:
            out[key] = [float(v) for v in d.max[i]]
    return out


def find_mismatches(d_ours: Diff, d_ref: Diff, d_ours64: Optional[Diff], tol: float) -> List[int]:
    """Lines whose outputs differ beyond rounding.

    With the float64 run of ours: lines where ours64 is off ref64 by more than ``tol`` (both
    near-exact, so any such line is a real difference). Without it: lines where ours32 is off
    ref64 by more than ``tol`` and by more than 10x AllenNLP float32's own error.
    """
    if d_ours64 is not None:
        worst = d_ours64.line_max()
        return [int(i) for i in np.argsort(-worst) if worst[i] > tol]
    excess = np.max(d_ours.max - 10.0 * np.maximum(d_ref.max, tol / 10.0), axis=1)
    return [int(i) for i in np.argsort(-excess) if excess[i] > 0]


def compare_config(name: str, weight_args: object, text: Path, lines: List[str],
                   n_edge: int, work: Path, a: argparse.Namespace) -> dict:
    """All four runs for one weight shape, and the per-layer statistics."""
    sentences = [line.split() for line in lines]
    wdir = make_weights(work / name, weight_args, a.seed)
    options = json.loads((wdir / "options.json").read_text())
    kw = dict(threads=a.threads, batch_size=a.batch_size)
    ref64 = run_ref(a.ref_python, wdir, text, work / f"{name}-ref64.npz", len(lines), True, **kw)
    ref32 = run_ref(a.ref_python, wdir, text, work / f"{name}-ref32.npz", len(lines), False, **kw)
    ours32 = run_ours(wdir, sentences, False, **kw)
    ours64 = None if a.skip_ours64 else run_ours(wdir, sentences, True, **kw)

    runs = [r for r in (ref32, ours32, ours64) if r is not None]
    problems = [p for r in runs for p in check_shapes(r, ref64, sentences)]
    if problems:
        return {"config": name, "options": options, "shape_problems": problems[:20]}

    d_ours, d_ref, d_pair = diff(ours32, ref64), diff(ref32, ref64), diff(ours32, ref32)
    d_ours64 = diff(ours64, ref64) if ours64 is not None else None
    scale = layer_scale(ref64)
    nonempty = [i for i, s in enumerate(sentences) if s]
    layers = []
    for k in range(len(scale)):
        layers.append({
            "layer": k,
            "max_abs_ref64": float(scale[k]),
            "ours32_vs_ref64": d_ours.layer_max(k),
            "ref32_vs_ref64": d_ref.layer_max(k),
            "ratio_max": ratio(d_ours.layer_max(k), d_ref.layer_max(k)),
            "ours32_vs_ref64_mean": d_ours.layer_mean(k),
            "ref32_vs_ref64_mean": d_ref.layer_mean(k),
            "ratio_mean": ratio(d_ours.layer_mean(k), d_ref.layer_mean(k)),
            "ratio_median_line": ratio(d_ours.layer_median(k, nonempty), d_ref.layer_median(k, nonempty)),
            "ours32_vs_ref32": d_pair.layer_max(k),
            "ours64_vs_ref64": d_ours64.layer_max(k) if d_ours64 is not None else None,
        })
    per_line = {"ours32_vs_ref64": d_ours, "ref32_vs_ref64": d_ref, "ours64_vs_ref64": d_ours64}
    empty = [i for i, s in enumerate(sentences) if not s]
    worst32 = np.argsort(-d_ours.line_max())[:3]
    return {
        "config": name,
        "options": options,
        "n_lines": len(lines),
        "n_tokens": sum(len(s) for s in sentences),
        "empty_lines": empty,
        "empty_lines_n0": all(r.arrays[i].shape[1] == 0 for r in [ref64, *runs] for i in empty),
        "shape_problems": [],
        "seconds": {r.name: round(r.seconds, 2) for r in [ref64, *runs]},
        "layers": layers,
        "mismatch_lines": [line_report(i, lines, per_line)
                           for i in find_mismatches(d_ours, d_ref, d_ours64, a.tol)[:20]],
        "edge_case_lines": [line_report(i, lines, per_line)
                            for i in range(len(lines) - n_edge, len(lines))],
        "worst_float32_lines": [line_report(int(i), lines, per_line) for i in worst32],
    }


def fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2e}"


def fmt_list(xs: Optional[List[float]]) -> str:
    return "-" if xs is None else "[" + ", ".join(fmt(x) for x in xs) + "]"


def markdown_table(results: List[dict]) -> str:
    head = ("| config | layer | max abs ref64 | ours32 vs ref64 | ref32 vs ref64 | ratio (max) "
            "| ratio (mean abs) | ratio (median line) | ours32 vs ref32 | ours64 vs ref64 |")
    rows = [head, "|" + "---|" * 10]
    for r in results:
        if r.get("shape_problems"):
            rows.append(f"| {r['config']} | SHAPE MISMATCH: {'; '.join(r['shape_problems'][:3])} |")
            continue
        for layer in r["layers"]:
            rows.append(f"| {r['config']} | {layer['layer']} | {layer['max_abs_ref64']:.2f} "
                        f"| {fmt(layer['ours32_vs_ref64'])} | {fmt(layer['ref32_vs_ref64'])} "
                        f"| {layer['ratio_max']:.2f} | {layer['ratio_mean']:.2f} "
                        f"| {layer['ratio_median_line']:.2f} "
                        f"| {fmt(layer['ours32_vs_ref32'])} | {fmt(layer['ours64_vs_ref64'])} |")
    return "\n".join(rows)


def describe_line(s: dict) -> str:
    return (f"    line {s['line']} ({s['n_tokens']} tok) {s['text']!r}\n"
            f"      ours32-ref64 {fmt_list(s['ours32_vs_ref64'])} "
            f"ref32-ref64 {fmt_list(s['ref32_vs_ref64'])} "
            f"ours64-ref64 {fmt_list(s.get('ours64_vs_ref64'))}")


def summary_lines(results: List[dict], tol: float) -> List[str]:
    out = []
    for r in results:
        if r.get("shape_problems"):
            continue
        out.append(f"{r['config']}: {r['n_lines']} lines, {r['n_tokens']} tokens; blank lines "
                   f"{r['empty_lines']} give n=0 on all runs: {r['empty_lines_n0']}; "
                   f"seconds {r['seconds']}")
        out.append(f"  lines differing beyond rounding (tol {tol:g}): {len(r['mismatch_lines'])}")
        out += [describe_line(s) for s in r["mismatch_lines"]]
        out.append("  edge-case lines (max abs diff per layer):")
        out += [describe_line(s) for s in r["edge_case_lines"]]
        out.append("  lines with the largest ours32-ref64 difference:")
        out += [describe_line(s) for s in r["worst_float32_lines"]]
    return out


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref-python", required=True,
                    help="python of a virtualenv with AllenNLP 2.10.1 (recipe: bench/allennlp_ref.py)")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated subset of {', '.join(CONFIGS)}")
    ap.add_argument("--sentences", type=int, default=200, help="random sentences (edge cases added)")
    ap.add_argument("--seed", type=int, default=0, help="seed for weights and sentences")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--tol", type=float, default=1e-5, help="flag lines where ours32 is off "
                    "ref64 by more than this and by > 4x AllenNLP float32's own error")
    ap.add_argument("--skip-ours64", action="store_true", help="skip the float64 run of ours")
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write the results")
    ap.add_argument("--keep", type=Path, help="keep weights, sentences and .npz files here")
    a = ap.parse_args(argv)
    unknown = set(a.configs.split(",")) - set(CONFIGS)
    if unknown:
        ap.error(f"unknown configs {sorted(unknown)}; choose from {list(CONFIGS)}")
    return a


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="elmo-compare-") as tmp:
        work = a.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        text = work / "sentences.txt"
        lines = make_sentences(text, a.sentences, a.seed)
        n_edge = len(lines) - a.sentences
        results = []
        for name in a.configs.split(","):
            print(f"[{name}] running ...", file=sys.stderr, flush=True)
            results.append(compare_config(name, CONFIGS[name], text, lines, n_edge, work, a))
    table = markdown_table(results)
    print(table)
    print()
    print("\n".join(summary_lines(results, a.tol)))
    meta = {"sentences": a.sentences, "seed": a.seed, "batch_size": a.batch_size, "machine": machine(a.threads)}
    write_results(a.json, {"meta": meta, "results": results}, indent=2)
    print(f"\nwrote {a.json}", file=sys.stderr)
    bad = any(r.get("shape_problems") or r.get("mismatch_lines") for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
