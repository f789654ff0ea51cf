#!/usr/bin/env python3
"""Parity and speed of spacy_elmo's reading of ELMoForManyLangs models against their own package.

What it measures. For each weight shape in CONFIGS it writes a random model in the authors' exact
folder format (``spacy_elmo.hub.efml_random.write_random_efml``: config.json, the model config or
the name of their sample config, char.dic, word.dic, token_embedder.pkl, encoder.pkl), with
lexicons that cover only part of the text (unknown characters and words), and a JSON file of
seeded sentences in four scripts (Latin with diacritics, Cyrillic, Chinese characters, Arabic),
mixed lengths (a batch holds 1 to 150 tokens a row) and the edge cases of EDGE_CASES (an empty
sentence, an empty token, literal <bos>/<eos>/<S>, words at and past the character limit in
each script, characters outside the Basic Multilingual Plane, combining marks). Then:

  ref    their package in float64 (``bench/efml_ref.py --double``, in its own virtualenv):
         ``sents2elmo`` with output_layer=-2 (every layer) and -1 (the average), the LSTM state
         reset before each call of ``--batch-size`` sentences;
  ours   ``EfmlBiLM`` read from the same folder (``load_bilm(FOLDER)``: converted once into the
         cache) in float64 (``.double()``): ``sents2elmo`` with -2 and -1.

Per output layer (0 = token layer, k = LSTM layer k) and for the average it reports the largest
|ours - ref|, and lists every sentence off by more than ``--tol`` (1e-6; exit status 1 if any).
With ``--stateful-config`` it also compares their carried state (``--stateful``, consecutive
calls) with ``EfmlBiLM(stateful=True)`` fed each call's sentences in their order.

Speed (``--speed-config``, the published shape by default): both sides in float32 on the same
sentences, one thread each (``--threads``), batch size 64, each timed ``--rounds`` times
alternately after a warm-up; the medians and their ratio go into the results with the CPU.

Run from the repository root (one thread; a few minutes):

    python bench/efml_parity.py --ref-python REF_VENV/bin/python

REF_VENV is a virtualenv with ``elmoformanylangs`` on a CPU torch, kept outside the repository; the
recipe is in the docstring of bench/efml_ref.py and in docs/models.md. Writes
bench/results/efml-parity.json (and .md). ``--write-fixture tests/data/efml`` also writes the small
model, its sentences and the reference's float64 outputs that tests/test_efml.py checks in CI.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
DEFAULT_JSON = REPO / "bench" / "results" / "efml-parity.json"
sys.path.insert(0, str(REPO))  # this clone's spacy_elmo, whatever is installed

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
#: characters kept out of every character lexicon, so that the text always holds unknown ones
NEVER_KNOWN = set("☃ꙮ𝔘𝔫𝔦𝔠𝔬𝔡𝔢龘𠀀ﷺ")

EDGE_CASES: List[List[str]] = [
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


def synthetic(n: int, seed: int) -> List[List[str]]:
    """``n`` seeded sentences: mostly one script each, some mixed, lengths log-normal around 12."""
    rng = random.Random(seed)
    names = list(SCRIPTS)
    out = []
    for _ in range(n):
        length = max(1, min(80, int(round(rng.lognormvariate(2.5, 0.6)))))
        main = rng.choice(names)
        words = []
        for _ in range(length):
            r = rng.random()
            pool = SCRIPTS[main] if r < 0.8 else OTHER if r < 0.9 else SCRIPTS[rng.choice(names)]
            words.append(rng.choice(pool))
        out.append(words)
    return out


def _options(layers: int, cell: int, proj: int, filters: List[List[int]], highway: int, char_dim: int, word_dim: int,
             max_chars: int, activation: str = "relu", cell_clip: float = 3, proj_clip: float = 3) -> dict:
    return {
        "encoder": {"name": "elmo", "projection_dim": proj, "cell_clip": cell_clip, "proj_clip": proj_clip, "dim": cell, "n_layers": layers},
        "token_embedder": {"name": "cnn", "activation": activation, "filters": filters, "n_highway": highway, "word_dim": word_dim,
                           "char_dim": char_dim, "max_characters_per_token": max_chars},
        "classifier": {"name": "sampled_softmax", "n_samples": 8192},
        "dropout": 0.1,
    }


# name -> how write_random_efml writes it
CONFIGS: Dict[str, Dict[str, Any]] = {
    # small, their usual layout: word embedding, two highways, 50 characters, torch's old pickle format
    "tiny": {"model_config": _options(2, 64, 16, [[1, 4], [2, 8], [3, 16], [4, 32]], 2, 8, 8, 50), "legacy_pickle": True},
    # what no published model has: 3 layers, tanh CNN, one highway, no word embedding, a 20-character
    # limit (many words cut), unusual clips; a no-break space in char.dic (read as the ideographic space)
    "odd": {"model_config": _options(3, 48, 12, [[1, 8], [3, 16], [7, 32]], 1, 6, 0, 20, "tanh", 5, 2), "nbsp": True},
    # the published models' shape, by the name of the sample config their package ships
    "published": {"model_config": None, "ship_config": False, "sentences": 40},
    # the tests' stored fixture (tests/data/efml): small enough to keep in the repository
    "fixture": {"model_config": _options(2, 16, 4, [[1, 4], [2, 4], [3, 8]], 1, 4, 3, 16), "legacy_pickle": True, "sentences": 40},
}


def lexicons(sentences: Sequence[Sequence[str]], nbsp: bool, seed: int) -> Dict[str, List[str]]:
    from spacy_elmo.hub.efml_random import chars_of, words_of

    chars = [c for c in chars_of(sentences, 0.8, seed) if c not in NEVER_KNOWN]
    if nbsp:  # their reader strips the line to its id and files it under the ideographic space
        chars = [c for c in chars if c != "\u3000"] + ["\xa0"]
    return {"chars": chars, "words": words_of(sentences, 0.7, seed)}


def make_model(folder: Path, spec: Dict[str, Any], sentences: Sequence[Sequence[str]], seed: int) -> Path:
    from spacy_elmo.hub.efml_random import write_random_efml

    lex = lexicons(sentences, bool(spec.get("nbsp")), seed)
    return write_random_efml(folder, spec.get("model_config"), chars=lex["chars"], words=lex["words"], seed=seed,
                             ship_config=spec.get("ship_config", True), legacy_pickle=spec.get("legacy_pickle", False))


def run_tool(cmd: Sequence[str]) -> str:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


def run_ref(a: argparse.Namespace, model: Path, text: Path, out: Path, *flags: str) -> Dict[str, np.ndarray]:
    run_tool([a.ref_python, str(BENCH / "efml_ref.py"), "--model", str(model), "--input", str(text), "--out", str(out),
              "--batch-size", str(a.batch_size), "--threads", str(a.threads), *flags])
    with np.load(out) as npz:
        return {key: npz[key] for key in npz.files}


def coverage(model: Path, sentences: Sequence[Sequence[str]]) -> Dict[str, Any]:
    """What the text exercises in this model: unknown characters and words, words past the limit, scripts."""
    from spacy_elmo.bilm.efml_folder import efml_config

    section = efml_config(model).extra["efml"]
    chars, words, limit = section["chars"], section.get("words"), section["max_characters_per_token"]
    tokens = [t for s in sentences for t in s]
    return {
        "sentences": len(sentences),
        "tokens": len(tokens),
        "longest_sentence": max(len(s) for s in sentences),
        "unknown_characters": sum(1 for t in tokens for c in t if c not in chars),
        "unknown_words": None if words is None else sum(1 for t in tokens if t[: limit - 2] not in words),
        "words_past_limit": sum(1 for t in tokens if len(t) + 2 > limit),
        "tokens_per_script": {name: sum(1 for t in tokens if t in set(pool)) for name, pool in SCRIPTS.items()},
        "max_characters_per_token": limit,
        "word_embedding": words is not None,
    }


def compare(ours: List[np.ndarray], ref: Dict[str, np.ndarray], prefix: str, n: int) -> Dict[str, Any]:
    """Per-layer max |ours - ref| (or one value for 2-d arrays) and each sentence's max."""
    per_sentence, layers = [], None
    for i in range(n):
        key = f"{prefix}/{i}"
        if key not in ref:
            per_sentence.append(None)
            continue
        x, y = ours[i].astype(np.float64), ref[key].astype(np.float64)
        if x.shape != y.shape:
            raise RuntimeError(f"sentence {i} ({prefix}): ours {x.shape}, theirs {y.shape}")
        d = np.abs(x - y)
        if x.ndim == 3:  # [L+1, n, 2P]: one value per layer
            by_layer = d.max(axis=(1, 2)) if d.shape[1] else np.zeros(d.shape[0])
        else:  # the average [n, 2P]
            by_layer = np.array([d.max() if d.size else 0.0])
        layers = by_layer if layers is None else np.maximum(layers, by_layer)
        per_sentence.append(float(by_layer.max()))
    return {"max_by_layer": [] if layers is None else [float(v) for v in layers], "per_sentence": per_sentence}


def ours_arrays(model: Path, sentences: List[List[str]], batch_size: int, output_layer: int) -> List[np.ndarray]:
    from spacy_elmo import load_bilm

    bilm = load_bilm(str(model)).double()
    return bilm.sents2elmo(sentences, output_layer=output_layer, batch_size=batch_size)


def ours_stateful(model: Path, sentences: List[List[str]], batch_size: int) -> List[np.ndarray]:
    """Their carried state: each call's sentences in their order (longest first), state kept."""
    from spacy_elmo import load_bilm

    bilm = load_bilm(str(model), stateful=True).double()
    out: List[Optional[np.ndarray]] = [None] * len(sentences)
    for start in range(0, len(sentences), batch_size):
        group = list(range(start, min(start + batch_size, len(sentences))))
        group.sort(key=lambda i: -len(sentences[i]))  # their create_batches: a stable sort, longest first
        for i, array in zip(group, bilm.embed_sentences([sentences[i] for i in group], batch_size=len(group))):
            out[i] = array
    return out  # type: ignore[return-value]


def parity(name: str, spec: Dict[str, Any], a: argparse.Namespace, work: Path) -> Dict[str, Any]:
    n = spec.get("sentences", a.sentences)
    sentences = synthetic(n, a.seed) + EDGE_CASES
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    make_model(folder, spec, sentences, a.seed)
    text = work / f"{name}.json"
    text.write_text(json.dumps(sentences, ensure_ascii=False), encoding="utf-8")
    start = time.perf_counter()
    ref = run_ref(a, folder, text, work / f"{name}-ref.npz", "--double")
    ref_seconds = time.perf_counter() - start
    start = time.perf_counter()
    every = ours_arrays(folder, sentences, a.batch_size, -2)
    average = ours_arrays(folder, sentences, a.batch_size, -1)
    ours_seconds = time.perf_counter() - start
    d_all, d_avg = compare(every, ref, "all", len(sentences)), compare(average, ref, "avg", len(sentences))
    worst = [max(x or 0.0, y or 0.0) for x, y in zip(d_all["per_sentence"], d_avg["per_sentence"])]
    result: Dict[str, Any] = {
        "config": name,
        "model_config": spec.get("model_config") or "the sample config their package ships (the published shape)",
        "coverage": coverage(folder, sentences),
        "max_abs_ref": [float(max(np.abs(ref[f"all/{i}"][k]).max() if ref[f"all/{i}"].shape[1] else 0.0 for i in range(len(sentences))))
                        for k in range(every[0].shape[0])],
        "max_diff_by_layer": d_all["max_by_layer"],
        "max_diff_average": d_avg["max_by_layer"][0],
        "average_left_out": [i for i in range(len(sentences)) if f"avg/{i}" not in ref],
        "edge_case_max_diff": worst[n:],
        "mismatch_sentences": [{"sentence": i, "max_diff": worst[i], "tokens": sentences[i][:12]} for i in np.argsort(worst)[::-1] if worst[i] > a.tol][:20],
        "seconds": {"ref_float64": round(ref_seconds, 2), "ours_float64": round(ours_seconds, 2)},
    }
    if name in a.stateful_configs.split(","):
        ref_state = run_ref(a, folder, text, work / f"{name}-stateful.npz", "--double", "--stateful")
        d_state = compare(ours_stateful(folder, sentences, a.batch_size), ref_state, "all", len(sentences))
        result["stateful_max_diff_by_layer"] = d_state["max_by_layer"]
        result["stateful_mismatch_sentences"] = [i for i, v in enumerate(d_state["per_sentence"]) if v is not None and v > a.tol]
    if a.write_fixture and name == "fixture":
        write_fixture(a.write_fixture, folder, sentences, ref)
    return result


def write_fixture(target: Path, folder: Path, sentences: List[List[str]], ref: Dict[str, np.ndarray]) -> None:
    """The tests' fixture: the model folder, its sentences and the reference's float64 outputs."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(folder, target / "model")
    (target / "sentences.json").write_text(json.dumps(sentences, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    np.savez_compressed(target / "reference.npz", **ref)
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"wrote the fixture {target} ({size / 1e3:.0f} kB)", file=sys.stderr)


def speed(a: argparse.Namespace, work: Path) -> Dict[str, Any]:
    """Both sides in float32 on the same sentences and thread count, timed alternately."""
    import torch
    from spacy_elmo import load_bilm

    spec = CONFIGS[a.speed_config]
    sentences = synthetic(a.speed_sentences, a.seed + 1)
    folder = work / f"speed-{a.speed_config}"
    shutil.rmtree(folder, ignore_errors=True)
    make_model(folder, spec, sentences, a.seed)
    text = work / "speed.json"
    text.write_text(json.dumps(sentences, ensure_ascii=False), encoding="utf-8")
    torch.set_num_threads(a.threads)
    bilm = load_bilm(str(folder))
    bilm.embed_sentences(sentences[: a.batch_size], batch_size=a.batch_size)  # warm-up
    tokens = sum(len(s) for s in sentences)
    ours, theirs, ref_lines = [], [], []
    for _ in range(a.rounds):
        line = run_tool([a.ref_python, str(BENCH / "efml_ref.py"), "--model", str(folder), "--input", str(text), "--bench",
                         "--batch-size", str(a.batch_size), "--threads", str(a.threads)])
        ref_line = next(x for x in line.splitlines() if x.startswith("ref "))
        ref_lines.append(ref_line)
        theirs.append(float(dict(f.split("=") for f in ref_line.split()[1:])["tokens_per_s"]))
        start = time.perf_counter()
        bilm.embed_sentences(sentences, batch_size=a.batch_size)
        ours.append(tokens / (time.perf_counter() - start))
    return {
        "config": a.speed_config,
        "what": "tokens per second embedding the same sentences (all layers, float32): their Embedder.sents2elmo vs EfmlBiLM.embed_sentences",
        "sentences": len(sentences),
        "tokens": tokens,
        "batch_size": a.batch_size,
        "threads": a.threads,
        "rounds": a.rounds,
        "ours_tokens_per_s": [round(x, 1) for x in ours],
        "theirs_tokens_per_s": [round(x, 1) for x in theirs],
        "ours_median": round(statistics.median(ours), 1),
        "theirs_median": round(statistics.median(theirs), 1),
        "speedup": round(statistics.median(ours) / statistics.median(theirs), 2),
        "ref_lines": ref_lines,
    }


def markdown(results: List[Dict[str, Any]], fast: Optional[Dict[str, Any]], tol: float) -> str:
    rows = ["| config | layer | max abs (theirs) | max abs diff, float64 |", "|---|---|---|---|"]
    for r in results:
        for k, (scale, d) in enumerate(zip(r["max_abs_ref"], r["max_diff_by_layer"])):
            rows.append(f"| {r['config']} | {k} | {scale:.2f} | {d:.1e} |")
        rows.append(f"| {r['config']} | average | - | {r['max_diff_average']:.1e} |")
        if "stateful_max_diff_by_layer" in r:
            rows.append(f"| {r['config']} | all, carried state | - | {max(r['stateful_max_diff_by_layer']):.1e} |")
    lines = rows + [""]
    for r in results:
        c = r["coverage"]
        lines.append(f"- {r['config']}: {c['sentences']} sentences, {c['tokens']} tokens (longest {c['longest_sentence']}), "
                     f"{c['unknown_characters']} unknown characters, {c['unknown_words']} unknown words, "
                     f"{c['words_past_limit']} words past the {c['max_characters_per_token']}-character limit; "
                     f"sentences off by more than {tol:g}: {len(r['mismatch_sentences'])}")
    if fast is not None:
        lines.append(f"- speed ({fast['config']}, float32, {fast['threads']} thread, batch {fast['batch_size']}, {fast['tokens']} tokens, "
                     f"median of {fast['rounds']}): ours {fast['ours_median']} tokens/s, theirs {fast['theirs_median']} tokens/s, "
                     f"{fast['speedup']}x")
    return "\n".join(lines) + "\n"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref-python", required=True, help="python of a virtualenv with elmoformanylangs (recipe: bench/efml_ref.py)")
    ap.add_argument("--configs", default="tiny,odd,published,fixture", help=f"comma-separated subset of {', '.join(CONFIGS)}")
    ap.add_argument("--stateful-configs", default="tiny", help="configs whose carried-state runs are compared too")
    ap.add_argument("--sentences", type=int, default=200, help="random sentences per config (edge cases added)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--tol", type=float, default=1e-6, help="largest difference allowed in float64")
    ap.add_argument("--speed-config", default="published", help="the shape timed ('' skips the timing)")
    ap.add_argument("--speed-sentences", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON)
    ap.add_argument("--write-fixture", type=Path, help="write the 'fixture' config's model, sentences and reference outputs here")
    ap.add_argument("--keep", type=Path, help="keep models, sentences and outputs here")
    a = ap.parse_args(argv)
    unknown = set(a.configs.split(",")) - set(CONFIGS)
    if unknown:
        ap.error(f"unknown configs {sorted(unknown)}; choose from {list(CONFIGS)}")
    return a


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = parse_args(argv)
    import torch
    from spacy_elmo.kernels import cpu

    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory(prefix="efml-parity-") as tmp:
        work = a.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("SPACY_ELMO_CACHE", str(work / "cache"))  # the conversions stay with the run
        results = []
        for name in a.configs.split(","):
            print(f"[{name}] parity ...", file=sys.stderr, flush=True)
            results.append(parity(name, CONFIGS[name], a, work))
        fast = None
        if a.speed_config:
            print(f"[{a.speed_config}] speed ...", file=sys.stderr, flush=True)
            fast = speed(a, work)
    ref_version = run_tool([a.ref_python, "-c", "import importlib.metadata as m; print(m.version('elmoformanylangs'))"]).strip()
    meta = {
        "machine": f"{cpu.cpuinfo().get('model name', platform.processor() or 'unknown CPU')}, {os.cpu_count()} cores visible, no GPU",
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "threads": a.threads,
        "batch_size": a.batch_size,
        "tol": a.tol,
        "seed": a.seed,
        "torch": torch.__version__,
        "elmoformanylangs": ref_version,
        "python": platform.python_version(),
        "command": "python bench/efml_parity.py --ref-python REF_VENV/bin/python",
    }
    table = markdown(results, fast, a.tol)
    sys.path.insert(0, str(BENCH))
    from bench_common import write_results

    write_results(a.json, {"meta": meta, "parity": results, "speed": fast}, table)
    bad = any(r["mismatch_sentences"] or r.get("stateful_mismatch_sentences") for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
