#!/usr/bin/env python3
"""Numerical parity of spacy_elmo's biLMs with the authors' fixture and with the reference implementations.

    python bench/parity.py                                             # the authors' fixture (docs/evaluations.md)
    python bench/parity.py allennlp --ref-python REF_VENV/bin/python   # AllenNLP 2.10.1 (docs/evaluations.md)
    python bench/parity.py efml --ref-python REF_VENV/bin/python       # ELMoForManyLangs' package (docs/models.md)

``fixture`` (the default): max abs differences of the top layer against tests/data/elmo-fixture
(AllenNLP's and bilm-tf's stored outputs: batch 0 stateless, all 10 batches stateful) and of the
context-free token layer.

``allennlp``: for each shape of ``ALLENNLP`` (AllenNLP's test fixture's, ``elmo-small``, and an odd
one: 3 layers, tanh char-CNN, one highway, unusual clips), random weights (``random-weights``),
seeded sentences plus bench_common's ``EDGE_CASES``, four stateless runs: ref64 and ref32 (AllenNLP
through bench/reference.py, float64 and float32), ours32 and ours64 (``load_bilm``, float64 by
``.double()``). Per output layer: max|ours32 - ref64| against max|ref32 - ref64| and their ratio
(about 1: ours in float32 as accurate as AllenNLP's), the same ratio of the mean |error| and of the
median over lines of each line's max, max|ours32 - ref32| and max|ours64 - ref64| (both near-exact:
a difference in the maths, not rounding). Same lines and shapes on both sides (a blank line gives 0
tokens); lines off beyond ``--tol`` are listed (exit status 1 if any).

``efml``: for each shape of ``EFML``, a random model in the authors' folder format
(``write_random_efml``) whose lexicons cover part of the text, and multilingual sentences with
``EFML_EDGE_CASES``; their package (float64, the state reset before each call of ``--batch-size``
sentences, ``output_layer`` -2 and -1) against ``load_bilm(FOLDER)`` in float64: max |ours - ref|
per layer and for the average, sentences off by more than ``--tol`` (exit status 1 if any); for
``--stateful-configs`` their carried state against ``stateful=True``; then speed (float32, both
sides timed alternately ``--rounds`` times on the same sentences). ``--write-fixture tests/data/efml``
writes the small model, its sentences and their outputs that tests/test_efml.py checks.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import reference  # bench/reference.py
from bench_common import EDGE_CASES, REPO, RESULTS, machine, random_weights, synthetic, timed, use_threads, write_results

FIX = REPO / "tests" / "data" / "elmo-fixture"

# --------------------------------------------------------------------------------- the fixture


def fixture(a: argparse.Namespace) -> int:
    import h5py

    from spacy_elmo import load_bilm

    for name, sentence_file in (("allennlp", "sentences.json"), ("bilm-tf", "lm_embeddings_sentences.json")):
        sentences = json.loads((FIX / name / sentence_file).read_text())
        expected = []
        for k in range(3):
            with h5py.File(FIX / name / f"lm_embeddings_{k}.hdf5", "r") as f:
                expected.append([np.concatenate(f[str(i)][...], axis=-1) for i in range(10)])
        stateless, stateful = load_bilm(FIX / name), load_bilm(FIX / name, stateful=True)
        first = max(float(np.abs(o[2] - expected[k][0]).max()) for k, o in enumerate(stateless.embed_batch([s[0].split() for s in sentences])))
        every = max(float(np.abs(o[2] - expected[k][i]).max()) for i in range(10) for k, o in enumerate(stateful.embed_batch([s[i].split() for s in sentences])))
        print(f"{name}: top layer, batch 0 stateless {first:.1e}; all 10 batches stateful {every:.1e}")
    vocab = (FIX / "allennlp" / "vocab_test.txt").read_text().strip().split("\n")
    with h5py.File(FIX / "allennlp" / "elmo_token_embeddings.hdf5", "r") as f:
        tokens = f["embedding"][...]
    out = load_bilm(FIX / "allennlp").embed_sentences([[t] for t in vocab], batch_size=50)
    print(f"allennlp: context-free token layer (458 tokens) {float(np.abs(np.stack([o[0, 0, :16] for o in out]) - tokens).max()):.1e}")
    return 0


# ------------------------------------------------------------------------------------ shared


@dataclass
class Diff:
    """|ours - theirs| in float64 per line and output layer (a 2-d array is one layer): ``max`` and
    ``sum`` ``[lines, layers]`` (0 for a line without tokens or one theirs lacks), ``count`` values per layer."""

    max: np.ndarray
    sum: np.ndarray
    count: int

    @classmethod
    def of(cls, ours: Sequence[np.ndarray], theirs: Sequence[Optional[np.ndarray]]) -> "Diff":
        layers = max(x.shape[0] if x.ndim == 3 else 1 for x in ours)
        out = cls(np.zeros((len(ours), layers)), np.zeros((len(ours), layers)), 0)
        for i, (x, y) in enumerate(zip(ours, theirs)):
            if y is None:
                continue
            x, y = (v.astype(np.float64) if v.ndim == 3 else v.astype(np.float64)[None] for v in (x, y))
            if x.shape != y.shape:
                raise RuntimeError(f"line {i}: ours {x.shape}, theirs {y.shape}")
            d = np.abs(x - y)
            out.max[i] = d.max(axis=(1, 2)) if d.shape[1] else 0.0
            out.sum[i] = d.sum(axis=(1, 2))
            out.count += d.shape[1] * d.shape[2]
        return out

    def layer_max(self, k: int) -> float:
        return float(self.max[:, k].max())

    def layer_mean(self, k: int) -> float:
        return float(self.sum[:, k].sum() / max(self.count, 1))

    def layer_median(self, k: int, rows: Sequence[int]) -> float:
        """Median over ``rows`` of each line's max (robust to one chaotic line)."""
        return float(np.median(self.max[list(rows), k]))

    def line_max(self) -> np.ndarray:
        return self.max.max(axis=1)


def load_npz(path: Path) -> Dict[str, np.ndarray]:
    with np.load(path) as npz:
        return {key: npz[key] for key in npz.files}


def ratio(ours: float, ref: float) -> float:
    return ours / ref if ref > 0 else float("inf") if ours > 0 else 1.0


def fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2e}"


# ---------------------------------------------------------------------------------- AllenNLP


def allennlp_options(layers: int, cell: int, proj: int, filters: List[List[int]], highway: int, char_dim: int,
                     activation: str = "relu", cell_clip: float = 3, proj_clip: float = 3) -> dict:
    return {"lstm": {"n_layers": layers, "dim": cell, "projection_dim": proj, "cell_clip": cell_clip, "proj_clip": proj_clip, "use_skip_connections": True},
            "char_cnn": {"filters": filters, "n_highway": highway, "embedding": {"dim": char_dim}, "activation": activation,
                         "n_characters": 262, "max_characters_per_token": 50}}


# name -> what `random-weights` reads: a published model's name, or options
ALLENNLP: Dict[str, Any] = {
    "tiny": allennlp_options(2, 64, 16, [[1, 4], [2, 8], [3, 16], [4, 32], [5, 64]], 2, 4),  # AllenNLP's own test fixture's shapes
    "small": "elmo-small",
    "odd": allennlp_options(3, 96, 24, [[1, 8], [3, 16], [7, 32]], 1, 8, activation="tanh", cell_clip=5, proj_clip=2),  # what no published model has
}


def allennlp_config(name: str, a: argparse.Namespace, work: Path, text: Path, lines: List[str], n_edge: int) -> Dict[str, Any]:
    """The four runs of one shape, and the per-layer statistics."""
    sentences = [line.split() for line in lines]
    wdir = random_weights(ALLENNLP[name], work / f"{name}-seed{a.seed}", a.seed)
    runs: Dict[str, List[np.ndarray]] = {}
    seconds: Dict[str, float] = {}
    for double in (True, False):
        key, out = "ref64" if double else "ref32", work / f"{name}-ref{64 if double else 32}.npz"
        _, seconds[key] = timed(reference.run, a.ref_python, "allennlp", "--options", wdir / "options.json", "--weights", wdir / "weights.hdf5",
                                "--input", text, "--out", out, "--threads", a.threads, "--batch-size", a.batch_size, *(["--double"] if double else []))
        arrays = load_npz(out)
        missing = [i for i in range(len(lines)) if str(i) not in arrays]
        if missing:
            raise RuntimeError(f"{out}: missing lines {missing[:10]}")
        runs[key] = [arrays[str(i)] for i in range(len(lines))]
    from spacy_elmo import load_bilm

    use_threads(a.threads)
    for double in (False,) if a.skip_ours64 else (False, True):
        model = load_bilm(wdir)
        runs["ours64" if double else "ours32"], seconds["ours64" if double else "ours32"] = timed(
            (model.double() if double else model).embed_sentences, sentences, batch_size=a.batch_size)
    problems = [f"line {i}: {key} {x.shape}, ref64 {y.shape}, {len(s)} tokens" for key in runs if key != "ref64"
                for i, (x, y, s) in enumerate(zip(runs[key], runs["ref64"], sentences)) if x.shape != y.shape or x.shape[1] != len(s)]
    options = json.loads((wdir / "options.json").read_text())
    if problems:
        return {"config": name, "options": options, "shape_problems": problems[:20]}
    d_ours, d_ref, d_pair = Diff.of(runs["ours32"], runs["ref64"]), Diff.of(runs["ref32"], runs["ref64"]), Diff.of(runs["ours32"], runs["ref32"])
    d_ours64 = Diff.of(runs["ours64"], runs["ref64"]) if "ours64" in runs else None
    scale = np.max([np.abs(x).max(axis=(1, 2)) if x.shape[1] else np.zeros(x.shape[0]) for x in runs["ref64"]], axis=0)
    nonempty = [i for i, s in enumerate(sentences) if s]
    layers = [{
        "layer": k, "max_abs_ref64": float(scale[k]),
        "ours32_vs_ref64": d_ours.layer_max(k), "ref32_vs_ref64": d_ref.layer_max(k), "ratio_max": ratio(d_ours.layer_max(k), d_ref.layer_max(k)),
        "ours32_vs_ref64_mean": d_ours.layer_mean(k), "ref32_vs_ref64_mean": d_ref.layer_mean(k),
        "ratio_mean": ratio(d_ours.layer_mean(k), d_ref.layer_mean(k)),
        "ratio_median_line": ratio(d_ours.layer_median(k, nonempty), d_ref.layer_median(k, nonempty)),
        "ours32_vs_ref32": d_pair.layer_max(k), "ours64_vs_ref64": d_ours64.layer_max(k) if d_ours64 is not None else None,
    } for k in range(len(scale))]
    if d_ours64 is not None:  # both near-exact: any line off is a real difference
        worst = d_ours64.line_max()
        mismatches = [int(i) for i in np.argsort(-worst) if worst[i] > a.tol]
    else:  # ours32 off ref64 beyond tol and beyond 10x AllenNLP float32's own error
        excess = np.max(d_ours.max - 10.0 * np.maximum(d_ref.max, a.tol / 10.0), axis=1)
        mismatches = [int(i) for i in np.argsort(-excess) if excess[i] > 0]
    per_line = {"ours32_vs_ref64": d_ours, "ref32_vs_ref64": d_ref, "ours64_vs_ref64": d_ours64}

    def report(i: int) -> Dict[str, Any]:
        text = lines[i]
        return {"line": i, "n_tokens": len(text.split()), "text": text[:100] + ("..." if len(text) > 100 else ""),
                **{key: [float(v) for v in d.max[i]] for key, d in per_line.items() if d is not None}}

    empty = [i for i, s in enumerate(sentences) if not s]
    return {
        "config": name, "options": options, "n_lines": len(lines), "n_tokens": sum(map(len, sentences)), "empty_lines": empty,
        "empty_lines_n0": all(run[i].shape[1] == 0 for run in runs.values() for i in empty), "shape_problems": [],
        "seconds": {key: round(s, 2) for key, s in seconds.items()}, "layers": layers,
        "mismatch_lines": [report(i) for i in mismatches[:20]],
        "edge_case_lines": [report(i) for i in range(len(lines) - n_edge, len(lines))],
        "worst_float32_lines": [report(int(i)) for i in np.argsort(-d_ours.line_max())[:3]],
    }


def allennlp(a: argparse.Namespace, work: Path) -> Dict[str, Any]:
    text = work / "sentences.txt"
    text.write_text("".join(line + "\n" for line in synthetic(a.sentences, a.seed) + EDGE_CASES), encoding="utf-8")
    lines = text.read_text(encoding="utf-8").split("\n")[:-1]  # as bench/reference.py splits the file
    results = []
    for name in a.configs:
        print(f"[{name}] running ...", file=sys.stderr, flush=True)
        results.append(allennlp_config(name, a, work, text, lines, len(EDGE_CASES)))
    per_line = ("ours32_vs_ref64", "ref32_vs_ref64", "ours64_vs_ref64")
    rows = ["| config | layer | max abs ref64 | ours32 vs ref64 | ref32 vs ref64 | ratio (max) | ratio (mean abs) | ratio (median line) "
            "| ours32 vs ref32 | ours64 vs ref64 |", "|" + "---|" * 10]
    summary = []
    for r in results:
        if r["shape_problems"]:
            rows.append(f"| {r['config']} | SHAPE MISMATCH: {'; '.join(r['shape_problems'][:3])} |")
            continue
        rows += [f"| {r['config']} | {x['layer']} | {x['max_abs_ref64']:.2f} | {fmt(x['ours32_vs_ref64'])} | {fmt(x['ref32_vs_ref64'])} "
                 f"| {x['ratio_max']:.2f} | {x['ratio_mean']:.2f} | {x['ratio_median_line']:.2f} | {fmt(x['ours32_vs_ref32'])} | {fmt(x['ours64_vs_ref64'])} |"
                 for x in r["layers"]]
        summary += [f"{r['config']}: {r['n_lines']} lines, {r['n_tokens']} tokens; blank lines {r['empty_lines']} give n=0 on all runs: "
                    f"{r['empty_lines_n0']}; seconds {r['seconds']}; lines differing beyond rounding (tol {a.tol:g}): {len(r['mismatch_lines'])}"]
        for title, key in (("differing", "mismatch_lines"), ("edge case", "edge_case_lines"), ("largest ours32-ref64 difference", "worst_float32_lines")):
            summary += [f"  {title}: line {s['line']} ({s['n_tokens']} tok) {s['text']!r}, max abs diff per layer: "
                        + "; ".join(f"{k.replace('_vs_', '-')} [{', '.join(fmt(v) for v in s[k])}]" for k in per_line if k in s) for s in r[key]]
    return {"results": results, "table": "\n".join(rows) + "\n\n" + "\n".join(summary) + "\n",
            "bad": any(r["shape_problems"] or r["mismatch_lines"] for r in results), "reference": reference.version(a.ref_python, "allennlp")}


# ---------------------------------------------------------------------------- ELMoForManyLangs

LATIN = (
    "Grüße Straße Köln über naïve café façade jalapeño São Paulo Łódź Kraków žluťoučký kůň příliš Tiếng Việt người Đà Nẵng "
    "İstanbul şehir știință þorn garðinn élève garçon œuvre niño año ¿qué ¡sí Øresund Århus æble őszintén űr źdźbło "
    "Dvořák Ångström crème brûlée déjà vu Müller Fußgänger Ærø ĳs Çalışkan"
).split()
CYRILLIC = (
    "Москва привет мир язык объявление съешь ещё щука Україна їжак ґанок Беларусь ўсход Ђорђе љубав џез республика в и на "
    "с что это человек государство Ёлка подъезд Хабаровск жёлтый"
).split()
CHINESE = "北京 欢迎 你 我们 中华人民共和国 的 是 了 在 人 有 这 学习 语言 模型 龘 𠀀 。 ， 《 》 一二三 上海 研究 自然语言处理".split()
ARABIC = "مرحبا بالعالم اللغة العربية كتاب مدرسة في من على إلى السلام عليكم ١٢٣ ؟ ، الذكاء الاصطناعي مُحَمَّد ﷺ القاهرة".split()
OTHER = ["2024", "3,14", ",", ".", "!", "?", "—", "…", "🙂", "👩\u200d🔬", "☃", "ꙮ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "全\u3000角"]
SCRIPTS = {"latin": LATIN, "cyrillic": CYRILLIC, "chinese": CHINESE, "arabic": ARABIC}
NEVER_KNOWN = set("☃ꙮ𝔘𝔫𝔦𝔠𝔬𝔡𝔢龘𠀀ﷺ")  # kept out of every character lexicon, so that the text always holds unknown ones
# an empty sentence and token, literal <bos>/<eos>/<S>, words at and past the character limit in each
# script, characters outside the Basic Multilingual Plane, combining marks, a 151-token sentence
EFML_EDGE_CASES: List[List[str]] = [
    [],
    ["x"],
    ["<bos>", "and", "<eos>", "are", "words", "here", "<S>", "</S>", "<oov>", "<pad>", "<bow>", "<eow>"],
    ["", "empty", "token", ""],
    ["q" * 46, "r" * 47, "s" * 48, "t" * 49, "u" * 50, "v" * 51, "w" * 120],
    ["ж" * 48, "щ" * 49, "Ё" * 70, "中" * 48, "华" * 49, "语" * 60, "ع" * 49, "ب" * 55, "é" * 49, "e\u0301" * 30],
    ["🙂" * 49, "𠀀" * 50, "👩\u200d🔬" * 20],
    ["combining", "e\u0301", "joiner", "👩\u200d🔬", "control", "\x7f", "nbsp", "a\xa0b", "ideographic", "全\u3000角"],
    ["token"] * 150 + ["."],
]


def multilingual(n: int, seed: int) -> List[List[str]]:
    """``n`` seeded sentences: mostly one script each, some mixed, lengths log-normal around 12."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length, main = max(1, min(80, int(round(rng.lognormvariate(2.5, 0.6))))), rng.choice(list(SCRIPTS))
        words = []
        for _ in range(length):
            r = rng.random()
            words.append(rng.choice(SCRIPTS[main] if r < 0.8 else OTHER if r < 0.9 else SCRIPTS[rng.choice(list(SCRIPTS))]))
        out.append(words)
    return out


def efml_options(layers: int, cell: int, proj: int, filters: List[List[int]], highway: int, char_dim: int, word_dim: int,
                 max_chars: int, activation: str = "relu", cell_clip: float = 3, proj_clip: float = 3) -> dict:
    return {"encoder": {"name": "elmo", "projection_dim": proj, "cell_clip": cell_clip, "proj_clip": proj_clip, "dim": cell, "n_layers": layers},
            "token_embedder": {"name": "cnn", "activation": activation, "filters": filters, "n_highway": highway, "word_dim": word_dim,
                               "char_dim": char_dim, "max_characters_per_token": max_chars},
            "classifier": {"name": "sampled_softmax", "n_samples": 8192}, "dropout": 0.1}


# name -> how write_random_efml writes it
EFML: Dict[str, Dict[str, Any]] = {
    # small, their usual layout: word embedding, two highways, 50 characters, torch's old pickle format
    "tiny": {"model_config": efml_options(2, 64, 16, [[1, 4], [2, 8], [3, 16], [4, 32]], 2, 8, 8, 50), "legacy_pickle": True},
    # what no published model has: 3 layers, tanh CNN, one highway, no word embedding, a 20-character
    # limit (many words cut), unusual clips; a no-break space in char.dic (read as the ideographic space)
    "odd": {"model_config": efml_options(3, 48, 12, [[1, 8], [3, 16], [7, 32]], 1, 6, 0, 20, "tanh", 5, 2), "nbsp": True},
    # the published models' shape, by the name of the sample config their package ships
    "published": {"model_config": None, "ship_config": False, "sentences": 40},
    # the tests' stored fixture (tests/data/efml): small enough to keep in the repository
    "fixture": {"model_config": efml_options(2, 16, 4, [[1, 4], [2, 4], [3, 8]], 1, 4, 3, 16), "legacy_pickle": True, "sentences": 40},
}


def efml_model(folder: Path, spec: Dict[str, Any], sentences: Sequence[Sequence[str]], seed: int) -> Path:
    """A random model in their folder format whose lexicons cover part of ``sentences``."""
    from spacy_elmo.hub.efml_random import chars_of, words_of, write_random_efml

    shutil.rmtree(folder, ignore_errors=True)
    chars = [c for c in chars_of(sentences, 0.8, seed) if c not in NEVER_KNOWN]
    if spec.get("nbsp"):  # their reader strips the line to its id and files it under the ideographic space
        chars = [c for c in chars if c != "\u3000"] + ["\xa0"]
    return write_random_efml(folder, spec.get("model_config"), chars=chars, words=words_of(sentences, 0.7, seed), seed=seed,
                             ship_config=spec.get("ship_config", True), legacy_pickle=spec.get("legacy_pickle", False))


def coverage(model: Path, sentences: Sequence[Sequence[str]]) -> Dict[str, Any]:
    """What the text exercises in this model: unknown characters and words, words past the limit, scripts."""
    from spacy_elmo.bilm.efml_folder import efml_config

    section = efml_config(model).extra["efml"]
    chars, words, limit = section["chars"], section.get("words"), section["max_characters_per_token"]
    tokens = [t for s in sentences for t in s]
    return {"sentences": len(sentences), "tokens": len(tokens), "longest_sentence": max(len(s) for s in sentences),
            "unknown_characters": sum(1 for t in tokens for c in t if c not in chars),
            "unknown_words": None if words is None else sum(1 for t in tokens if t[: limit - 2] not in words),
            "words_past_limit": sum(1 for t in tokens if len(t) + 2 > limit),
            "tokens_per_script": {name: sum(1 for t in tokens if t in set(pool)) for name, pool in SCRIPTS.items()},
            "max_characters_per_token": limit, "word_embedding": words is not None}


def efml_ref(a: argparse.Namespace, model: Path, text: Path, out: Path, *flags: str) -> Dict[str, np.ndarray]:
    reference.run(a.ref_python, "efml", "--model", model, "--input", text, "--out", out, "--batch-size", a.batch_size, "--threads", a.threads, *flags)
    return load_npz(out)


def efml_config(name: str, a: argparse.Namespace, work: Path) -> Dict[str, Any]:
    from spacy_elmo import load_bilm

    spec = EFML[name]
    n = spec.get("sentences", a.sentences)
    sentences = multilingual(n, a.seed) + EFML_EDGE_CASES
    folder = efml_model(work / name, spec, sentences, a.seed)
    text = work / f"{name}.json"
    text.write_text(json.dumps(sentences, ensure_ascii=False), encoding="utf-8")
    ref, ref_seconds = timed(efml_ref, a, folder, text, work / f"{name}-ref.npz", "--double")
    (every, average), ours_seconds = timed(lambda: [load_bilm(str(folder)).double().sents2elmo(sentences, output_layer=k, batch_size=a.batch_size)
                                                    for k in (-2, -1)])
    d_all = Diff.of(every, [ref.get(f"all/{i}") for i in range(len(sentences))])
    d_avg = Diff.of(average, [ref.get(f"avg/{i}") for i in range(len(sentences))])
    worst = np.maximum(d_all.line_max(), d_avg.line_max())
    result: Dict[str, Any] = {
        "config": name,
        "model_config": spec.get("model_config") or "the sample config their package ships (the published shape)",
        "coverage": coverage(folder, sentences),
        "max_abs_ref": [float(max(np.abs(ref[f"all/{i}"][k]).max() if ref[f"all/{i}"].shape[1] else 0.0 for i in range(len(sentences))))
                        for k in range(every[0].shape[0])],
        "max_diff_by_layer": [d_all.layer_max(k) for k in range(d_all.max.shape[1])],
        "max_diff_average": d_avg.layer_max(0),
        "average_left_out": [i for i in range(len(sentences)) if f"avg/{i}" not in ref],
        "edge_case_max_diff": [float(x) for x in worst[n:]],
        "mismatch_sentences": [{"sentence": int(i), "max_diff": float(worst[i]), "tokens": sentences[i][:12]} for i in np.argsort(-worst) if worst[i] > a.tol][:20],
        "seconds": {"ref_float64": round(ref_seconds, 2), "ours_float64": round(ours_seconds, 2)},
    }
    if name in a.stateful_configs.split(","):  # their carried state: each call's sentences in their order (longest first), state kept
        ref_state = efml_ref(a, folder, text, work / f"{name}-stateful.npz", "--double", "--stateful")
        bilm, ours = load_bilm(str(folder), stateful=True).double(), [None] * len(sentences)
        for start in range(0, len(sentences), a.batch_size):
            group = sorted(range(start, min(start + a.batch_size, len(sentences))), key=lambda i: -len(sentences[i]))  # their create_batches
            for i, array in zip(group, bilm.embed_sentences([sentences[i] for i in group], batch_size=len(group))):
                ours[i] = array
        d_state = Diff.of(ours, [ref_state.get(f"all/{i}") for i in range(len(sentences))])
        result["stateful_max_diff_by_layer"] = [d_state.layer_max(k) for k in range(d_state.max.shape[1])]
        result["stateful_mismatch_sentences"] = [int(i) for i, v in enumerate(d_state.line_max()) if v > a.tol]
    if a.write_fixture and name == "fixture":  # the tests' fixture: the model folder, its sentences and their float64 outputs
        shutil.rmtree(a.write_fixture, ignore_errors=True)
        shutil.copytree(folder, a.write_fixture / "model")
        (a.write_fixture / "sentences.json").write_text(json.dumps(sentences, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
        np.savez_compressed(a.write_fixture / "reference.npz", **ref)
    return result


def efml_speed(a: argparse.Namespace, work: Path) -> Dict[str, Any]:
    """Both sides in float32 on the same sentences and thread count, timed alternately."""
    from spacy_elmo import load_bilm

    sentences = multilingual(a.speed_sentences, a.seed + 1)
    folder = efml_model(work / f"speed-{a.speed_config}", EFML[a.speed_config], sentences, a.seed)
    text = work / "speed.json"
    text.write_text(json.dumps(sentences, ensure_ascii=False), encoding="utf-8")
    bilm = load_bilm(str(folder))
    bilm.embed_sentences(sentences[: a.batch_size], batch_size=a.batch_size)  # warm-up
    tokens = sum(len(s) for s in sentences)
    ours, theirs = [], []
    for _ in range(a.rounds):
        theirs.append(reference.speed(reference.run(a.ref_python, "efml", "--model", folder, "--input", text, "--bench",
                                                    "--batch-size", a.batch_size, "--threads", a.threads))["tokens_per_s"])
        ours.append(tokens / timed(bilm.embed_sentences, sentences, batch_size=a.batch_size)[1])
    return {"config": a.speed_config, "sentences": len(sentences), "tokens": tokens, "batch_size": a.batch_size, "threads": a.threads,
            "what": "tokens per second embedding the same sentences (all layers, float32): their Embedder.sents2elmo vs EfmlBiLM.embed_sentences",
            "rounds": a.rounds, "ours_tokens_per_s": [round(x, 1) for x in ours], "theirs_tokens_per_s": [round(x, 1) for x in theirs],
            "ours_median": round(statistics.median(ours), 1), "theirs_median": round(statistics.median(theirs), 1),
            "speedup": round(statistics.median(ours) / statistics.median(theirs), 2)}


def efml(a: argparse.Namespace, work: Path) -> Dict[str, Any]:
    os.environ.setdefault("SPACY_ELMO_CACHE", str(work / "cache"))  # the conversions stay with the run
    use_threads(a.threads)
    results = []
    for name in a.configs:
        print(f"[{name}] parity ...", file=sys.stderr, flush=True)
        results.append(efml_config(name, a, work))
    fast = efml_speed(a, work) if a.speed_config else None
    rows = ["| config | layer | max abs (theirs) | max abs diff, float64 |", "|---|---|---|---|"]
    for r in results:
        rows += [f"| {r['config']} | {k} | {scale:.2f} | {d:.1e} |" for k, (scale, d) in enumerate(zip(r["max_abs_ref"], r["max_diff_by_layer"]))]
        rows.append(f"| {r['config']} | average | - | {r['max_diff_average']:.1e} |")
        if "stateful_max_diff_by_layer" in r:
            rows.append(f"| {r['config']} | all, carried state | - | {max(r['stateful_max_diff_by_layer']):.1e} |")
    rows.append("")
    for r in results:
        c = r["coverage"]
        rows.append(f"- {r['config']}: {c['sentences']} sentences, {c['tokens']} tokens (longest {c['longest_sentence']}), "
                    f"{c['unknown_characters']} unknown characters, {c['unknown_words']} unknown words, {c['words_past_limit']} words past the "
                    f"{c['max_characters_per_token']}-character limit; sentences off by more than {a.tol:g}: {len(r['mismatch_sentences'])}")
    if fast is not None:
        rows.append(f"- speed ({fast['config']}, float32, {fast['threads']} thread, batch {fast['batch_size']}, {fast['tokens']} tokens, "
                    f"median of {fast['rounds']}): ours {fast['ours_median']} tokens/s, theirs {fast['theirs_median']} tokens/s, {fast['speedup']}x")
    return {"parity": results, "speed": fast, "table": "\n".join(rows) + "\n", "reference": reference.version(a.ref_python, "elmoformanylangs"),
            "bad": any(r["mismatch_sentences"] or r.get("stateful_mismatch_sentences") for r in results)}


# -------------------------------------------------------------------------------------- main


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="against")
    sub.add_parser("fixture", help="the authors' fixture (the default)")
    al = sub.add_parser("allennlp", help="AllenNLP 2.10.1, float32 and float64 on both sides")
    ef = sub.add_parser("efml", help="ELMoForManyLangs' package, float64, and speed")
    for p, configs, threads, tol in ((al, ALLENNLP, 2, 1e-5), (ef, EFML, 1, 1e-6)):
        p.add_argument("--ref-python", required=True, help="python of the reference's virtualenv (recipes: docs/benchmarks.md, docs/models.md)")
        p.add_argument("--configs", default=",".join(configs), help=f"comma-separated subset of {', '.join(configs)}")
        p.add_argument("--sentences", type=int, default=200, help="random sentences per config (the edge cases added)")
        p.add_argument("--seed", type=int, default=0, help="seed of the weights and the sentences")
        p.add_argument("--threads", type=int, default=threads)
        p.add_argument("--batch-size", type=int, default=64)
        p.add_argument("--tol", type=float, default=tol, help="largest difference allowed between the near-exact runs")
        p.add_argument("--json", type=Path, default=RESULTS / ("compare_allennlp.json" if p is al else "efml-parity.json"))
        p.add_argument("--keep", type=Path, help="keep weights, sentences and outputs here")
    al.add_argument("--skip-ours64", action="store_true", help="skip the float64 run of ours")
    ef.add_argument("--stateful-configs", default="tiny", help="configs whose carried-state runs are compared too")
    ef.add_argument("--speed-config", default="published", help="the shape timed ('' skips the timing)")
    ef.add_argument("--speed-sentences", type=int, default=200)
    ef.add_argument("--rounds", type=int, default=3)
    ef.add_argument("--write-fixture", type=Path, help="write the 'fixture' config's model, sentences and reference outputs here")
    a = ap.parse_args(argv)
    if a.against in (None, "fixture"):
        return fixture(a)
    a.configs = a.configs.split(",")
    unknown = set(a.configs) - set(ALLENNLP if a.against == "allennlp" else EFML)
    if unknown:
        ap.error(f"unknown configs {sorted(unknown)}")
    with tempfile.TemporaryDirectory(prefix=f"parity-{a.against}-") as tmp:
        work = a.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        out = (allennlp if a.against == "allennlp" else efml)(a, work)
    meta = {"machine": machine(a.threads), "reference": out.pop("reference"), "sentences": a.sentences, "seed": a.seed, "batch_size": a.batch_size,
            "tol": a.tol, "command": f"python bench/parity.py {a.against} --ref-python REF_VENV/bin/python"}
    bad, table = out.pop("bad"), out.pop("table")
    write_results(a.json, {"meta": meta, **out}, table)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
