#!/usr/bin/env python3
"""Downstream experiments: spaCy's CNN tok2vec vs the same task model with an ElmoListener.

    python scripts/downstream.py prepare  [--ud DIR] [--wnut DIR]       # .spacy files, nested subsets
    python scripts/downstream.py finetune [--minutes 8]                 # the default biLM tuned on EWT train text
    python scripts/downstream.py run      [--plan full|tiny] [--seeds 0 1 2]
    python scripts/downstream.py report                                  # metrics/downstream.{json,md}
    python scripts/downstream.py pos --lang de --train-conllu DEV.conllu.gz --test-conllu TEST.conllu.gz \
        --sizes 80 799 --weights MODEL --name de-gsd --output metrics/de-pos.json   # any language, see below

Every run trains with ``spacy train`` (same optimizer, steps and seeds for both models; the model
is selected on dev) and is scored once on test with ``spacy evaluate``. Finished runs are kept in
``metrics/downstream-runs.jsonl`` and skipped when ``run`` is started again, so an interrupted
workflow resumes where it stopped. Each run uses one thread.

``pos`` is the POS protocol for any language and any CoNLL-U pair: a tagger (XPOS, the English
protocol's ``tag_acc``) trained on the first N sentences of one file for each N of ``--sizes``,
with spaCy's CNN tok2vec (``cnn``) and with an ElmoListener on ``--weights`` (``elmo``), the
configs of the English runs with ``nlp.lang`` set, one run per seed, each scored once on the other
file. It is made for a treebank whose training split is not at hand (UD German GSD: dev and test
only), so no sentence is left over to select a model on: each run trains for a fixed number of
steps (``--steps``, one per size; the project passes the English plan's budgets for its two
low-data subsets, 100 steps at 1% and 300 at 10%) and the last model is scored, never one picked by a
score. ``spacy train`` still wants a dev corpus; it gets the run's own training file, whose
scores are printed and not used. Scoring reads the gold tokens (``spacy evaluate
--gold-preproc``): UD's syntactic words split contractions (German "im" = "in" + "dem"), which a
tokenizer run on the text would not reproduce. Finished runs are kept in
``metrics/NAME-pos-runs.jsonl`` with the biLM's digest and skipped on a re-run with the same
biLM, steps and data; the summary (mean and sd per size and features, the gain, the command, the
CPU) goes to ``--output`` and a markdown table beside it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

HERE = Path(__file__).resolve().parent.parent  # the project folder
DATA = HERE / "corpus" / "downstream"
RUNS = HERE / "training" / "downstream"
LOG = HERE / "metrics" / "downstream-runs.jsonl"
FINETUNED = HERE / "training" / "ewt-finetuned" / "model"

# per run: task, training subset, training file, max_steps, eval_frequency
PLANS: Dict[str, List[Dict[str, Any]]] = {
    "full": [
        # batches of 1,000 words: about 50, 15, 4 and 10 passes over the training words
        {"task": "pos", "subset": "1%", "train": "ud/train-1pct.spacy", "steps": 100, "eval": 25},
        {"task": "pos", "subset": "10%", "train": "ud/train-10pct.spacy", "steps": 300, "eval": 100},
        {"task": "pos", "subset": "100%", "train": "ud/train-100pct.spacy", "steps": 800, "eval": 200},
        {"task": "ner", "subset": "100%", "train": "wnut/train.spacy", "steps": 600, "eval": 150},
    ],
    "tiny": [
        {"task": "pos", "subset": "1%", "train": "ud/train-1pct.spacy", "steps": 20, "eval": 10},
        {"task": "ner", "subset": "100%", "train": "wnut/train.spacy", "steps": 20, "eval": 10},
    ],
}
DEV_LIMIT = {"full": 1000, "tiny": 100}
CONFIGS = {"pos": "tagger", "ner": "ner"}
SCORE = {"pos": "tag_acc", "ner": "ents_f"}


def _env() -> Dict[str, str]:
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[key] = "1"
    return env


def prepare(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE / "scripts"))
    from downstream_data import prepare_ud, prepare_wnut

    from spacy_elmo.assets import require_files

    try:
        require_files(Path(args.ud), [f"en_ewt-ud-{split}.conllu" for split in ("train", "dev", "test")], "UD English EWT", "--ud")
        require_files(Path(args.wnut), ["wnut17train.conll", "emerging.dev.conll", "emerging.test.annotated"], "WNUT17", "--wnut")
    except FileNotFoundError as err:
        sys.exit(f"downstream.py prepare: {err}")
    stats = {"ud": prepare_ud(Path(args.ud), DATA / "ud"), "wnut": prepare_wnut(Path(args.wnut), DATA / "wnut")}
    (HERE / "metrics").mkdir(exist_ok=True)
    (HERE / "metrics" / "downstream-data.json").write_text(json.dumps(stats, indent=2))
    print(json.dumps(stats, indent=2))


def finetune(args: argparse.Namespace) -> None:
    """Fine-tune the embedded default biLM on the EWT training text (unlabelled)."""
    sys.path.insert(0, str(HERE.parent))
    from spacy_elmo.models import default_model_path
    from spacy_elmo.training.corpus import prepare_corpus
    from spacy_elmo.training.trainer import TrainConfig, train

    corpus = HERE / "corpus" / "ewt-text"
    if not (corpus / "vocab.txt").exists():
        prepare_corpus([DATA / "ud" / "train-text"], corpus, lang="en", min_count=2, max_vocab=30000)
    config = dict(json.loads((HERE / "configs" / "finetune-full.json").read_text()))
    config.update(data_dir=str(corpus), out_dir=str(FINETUNED.parent), init_model=str(default_model_path()),
                  max_minutes=args.minutes, threads=1, eval_every=10**9)
    print(json.dumps(train(TrainConfig(**config), resume=True)))


def train_and_score(config: Path, train: Path, dev: Path, test: Path, out: Path, seed: int, steps: int, eval_frequency: int,
                    dev_limit: int, overrides: Sequence[str] = (), model: str = "model-best", gold_preproc: bool = False) -> Dict[str, Any]:
    """``spacy train`` (one thread) then ``spacy evaluate`` of ``out/model`` on ``test``: the test
    scores, with ``train_seconds``; ``overrides`` are more ``--section.key value`` arguments."""
    cmd = [
        sys.executable, "-m", "spacy", "train", str(config), "--output", str(out),
        "--paths.train", str(train), "--paths.dev", str(dev),
        "--system.seed", str(seed), "--training.max_steps", str(steps),
        "--training.eval_frequency", str(eval_frequency), "--corpora.dev.limit", str(dev_limit), *overrides,
    ]
    start = time.time()
    subprocess.run(cmd, check=True, env=_env(), stdout=subprocess.DEVNULL)
    train_s = time.time() - start
    scores = out / "test-scores.json"
    evaluate = [sys.executable, "-m", "spacy", "evaluate", str(out / model), str(test), "--output", str(scores)]
    subprocess.run(evaluate + (["--gold-preproc"] if gold_preproc else []), check=True, env=_env(), stdout=subprocess.DEVNULL)
    return {**json.loads(scores.read_text()), "train_seconds": round(train_s, 1)}


def _mixes(pipeline: Path) -> Dict[str, Any]:
    """The learned layer weights of an ElmoListener pipeline."""
    import spacy

    sys.path.insert(0, str(HERE.parent))
    from spacy_elmo.layers import learned_mixes

    return learned_mixes(spacy.load(pipeline))


def _run_one(plan: Dict[str, Any], model: str, seed: int, name: str, tag: str, weights: str = "") -> Dict[str, Any]:
    """One ``spacy train`` + ``spacy evaluate`` run; ``weights`` (a model folder) replaces the elmo
    config's biLM (the embedded default) for an ``elmo`` run."""
    task = plan["task"]
    data = DATA / ("ud" if task == "pos" else "wnut")
    config = HERE / "configs" / "downstream" / f"{CONFIGS[task]}-{'cnn' if model == 'cnn' else 'elmo'}.cfg"
    out = RUNS / name
    overrides: List[str] = []
    if model == "elmo-ewt":
        overrides = ["--components.elmo.model.weights", str(FINETUNED)]
    elif weights and model == "elmo":
        overrides = ["--components.elmo.model.weights", str(weights)]
    result = train_and_score(config, DATA / plan["train"], data / "dev.spacy", data / "test.spacy", out, seed, plan["steps"],
                             plan["eval"], DEV_LIMIT[tag], overrides)
    row = {"run": name, "task": task, "subset": plan["subset"], "model": model, "seed": seed,
           "score": result[SCORE[task]], "train_seconds": result["train_seconds"], "steps": plan["steps"],
           "test_words_per_second": result.get("speed")}
    if model != "cnn":
        row["mixes"] = _mixes(out / "model-best")
    return row


def _finished() -> set:
    if not LOG.exists():
        return set()
    return {json.loads(line)["run"] for line in LOG.read_text().splitlines() if line.strip()}


def _claim(name: str) -> bool:
    """Several runners may share the work (e.g. one per seed): each run is claimed once."""
    claims = RUNS / "claims"
    claims.mkdir(parents=True, exist_ok=True)
    try:
        (claims / name).mkdir()
    except FileExistsError:
        return False
    return True


def run(args: argparse.Namespace) -> None:
    LOG.parent.mkdir(parents=True, exist_ok=True)
    models = list(args.models)
    for seed in args.seeds:
        for plan in PLANS[args.plan]:
            if plan["task"] not in args.tasks:
                continue
            for model in models:
                if model == "elmo-ewt" and plan["task"] != "pos":
                    continue
                name = f"{args.plan}-{plan['task']}-{plan['subset'].rstrip('%')}pct-{model}-seed{seed}"
                if name in _finished():
                    continue
                if not _claim(name) and not args.reclaim:
                    continue
                print(f"running {name}", flush=True)
                row = _run_one(plan, model, seed, name, args.plan)
                print(json.dumps(row), flush=True)
                with LOG.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")


def report(args: argparse.Namespace) -> None:
    rows = [json.loads(line) for line in LOG.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["run"].startswith(args.plan + "-")]
    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["task"], r["subset"], r["model"]), []).append(r)
    summary = []
    for (task, subset, model), runs in sorted(groups.items()):
        scores = [100 * r["score"] for r in runs]
        entry = {"task": task, "subset": subset, "model": model, "n": len(runs), "mean": round(statistics.mean(scores), 2),
                 "sd": round(statistics.stdev(scores), 2) if len(scores) > 1 else 0.0, "scores": [round(s, 2) for s in scores],
                 "train_seconds": round(statistics.mean(r["train_seconds"] for r in runs), 1)}
        mixes = [m for r in runs for m in r.get("mixes", {}).values()]
        if mixes:
            weights = [m[0]["weights"] for m in mixes if m and m[0]["weights"]]
            entry["mix_weights"] = [round(statistics.mean(w[i] for w in weights), 3) for i in range(len(weights[0]))]
            entry["gamma"] = round(statistics.mean(m[0]["gamma"] for m in mixes), 3)
        summary.append(entry)
    lines = ["| task | training data | model | test score (mean ± sd) | seeds | learned layer weights (0, 1, 2) | gamma | train time (s, shared cores) |",
             "| --- | --- | --- | ---: | ---: | --- | ---: | ---: |"]
    order = {"cnn": 0, "elmo": 1, "elmo-ewt": 2}
    for e in sorted(summary, key=lambda e: (e["task"], float(e["subset"].rstrip("%")), order.get(e["model"], 9))):
        metric = "XPOS tag accuracy" if e["task"] == "pos" else "entity F1"
        weights = ", ".join(f"{w:.2f}" for w in e.get("mix_weights", [])) or "—"
        spread = f" ± {e['sd']:.2f}" if e["n"] > 1 else ""
        lines.append(f"| {e['task']} ({metric}) | {e['subset']} | {e['model']} | {e['mean']:.2f}{spread} | {e['n']} | {weights} | "
                     f"{e.get('gamma', '—')} | {e['train_seconds']} |")
    out = HERE / "metrics"
    (out / f"downstream-{args.plan}.json").write_text(json.dumps(summary, indent=2))
    (out / f"downstream-{args.plan}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


POS_FEATURES = {"cnn": "spaCy's CNN tok2vec (no ELMo)", "elmo": "ElmoListener on the biLM (frozen), learned layer mix"}
POS_DEV_LIMIT = 100  # the sentences of the run's own training file that spacy train prints scores on


def _digest(paths: Sequence[Path]) -> str:
    """SHA-256 over the files (a folder: its files, sorted by name), in order."""
    sha = hashlib.sha256()
    for path in paths:
        for item in sorted(path.iterdir()) if path.is_dir() else [path]:
            if item.is_file():
                sha.update(item.name.encode() + b"\0" + item.read_bytes())
    return sha.hexdigest()


def _cpu() -> str:
    sys.path.insert(0, str(HERE.parent))
    from spacy_elmo.kernels import cpu

    return cpu.cpuinfo().get("model name") or "unknown CPU"


def _pos_rows(log: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()] if log.is_file() else []


def pos_summary(rows: Sequence[Dict[str, Any]], sizes: Sequence[int], features: Sequence[str]) -> Dict[str, Any]:
    """Mean and sample sd (points) per (size, features), and ELMo's gain over the CNN per size."""
    results = []
    for size in sizes:
        for feature in features:
            runs = sorted((r for r in rows if r["size"] == size and r["features"] == feature), key=lambda r: r["seed"])
            if not runs:
                continue
            scores = [100 * r["score"] for r in runs]
            results.append({
                "size": size, "features": feature, "n": len(runs), "seeds": [r["seed"] for r in runs],
                "scores": [round(v, 2) for v in scores], "mean": round(statistics.mean(scores), 2),
                "sd": round(statistics.stdev(scores), 2) if len(scores) > 1 else 0.0,
                "train_seconds": round(statistics.mean(r["train_seconds"] for r in runs), 1),
            })
    means = {(e["size"], e["features"]): e["mean"] for e in results}
    gain = {str(size): round(means[(size, "elmo")] - means[(size, "cnn")], 2) for size in sizes
            if (size, "elmo") in means and (size, "cnn") in means}
    return {"results": results, "elmo_gain": gain}


def pos_table(summary: Dict[str, Any], lang: str) -> str:
    lines = [f"| training sentences | features | {lang} XPOS tag accuracy (mean ± sd) | seeds | scores | train time (s) |",
             "| ---: | --- | ---: | ---: | --- | ---: |"]
    for e in summary["results"]:
        lines.append(f"| {e['size']} | {e['features']} | {e['mean']:.2f} ± {e['sd']:.2f} | {e['n']} | "
                     f"{' / '.join(f'{v:.2f}' for v in e['scores'])} | {e['train_seconds']} |")
    gains = [f"{gain:+.2f} points at {size} sentences" for size, gain in summary["elmo_gain"].items()]
    if gains:
        lines += ["", f"ELMo over the CNN (means of the seeds): {', '.join(gains)}."]
    return "\n".join(lines) + "\n"


def pos(args: argparse.Namespace, argv: Sequence[str]) -> None:
    """The POS protocol on any language's CoNLL-U files (see the module's docstring)."""
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE / "scripts"))
    from downstream_data import prepare_conllu_prefixes

    steps = args.steps
    if len(steps) != len(args.sizes):
        sys.exit(f"downstream.py pos: --steps gives {len(steps)} budgets for {len(args.sizes)} --sizes (one per size)")
    missing = [str(p) for p in (args.train_conllu, args.test_conllu) if not p.is_file()]
    if missing:
        sys.exit(f"downstream.py pos: not found: {', '.join(missing)} (CoNLL-U files, optionally .gz)")
    if "elmo" in args.features and (args.weights is None or not args.weights.is_dir()):
        sys.exit(f"downstream.py pos: --weights {args.weights}: give the biLM folder the elmo runs read")
    data = DATA / args.name
    try:
        stats = prepare_conllu_prefixes(args.train_conllu, args.test_conllu, args.sizes, data)
    except ValueError as err:
        sys.exit(f"downstream.py pos: {err}")
    data_digest = _digest([args.train_conllu, args.test_conllu])[:16]
    weights_digest = _digest([args.weights])[:16] if "elmo" in args.features else None
    log = HERE / "metrics" / f"{args.name}-pos-runs.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)

    def same(row: Dict[str, Any], size_steps: int, feature: str) -> bool:
        return (row["steps"] == size_steps and row["lang"] == args.lang and row["data"] == data_digest
                and (feature == "cnn" or row.get("weights_sha256") == weights_digest))

    for seed in args.seeds:
        for size, size_steps in zip(args.sizes, steps):
            for feature in args.features:
                name = f"{args.name}-pos-{size}-{feature}-seed{seed}"
                if any(r["run"] == name and same(r, size_steps, feature) for r in _pos_rows(log)):
                    continue
                print(f"running {name}", flush=True)
                config = HERE / "configs" / "downstream" / f"tagger-{feature}.cfg"
                overrides = ["--nlp.lang", args.lang]
                if feature == "elmo":
                    overrides += ["--components.elmo.model.weights", str(args.weights)]
                train = data / f"train-{size}.spacy"
                result = train_and_score(config, train, train, data / "test.spacy", RUNS / name, seed, size_steps, size_steps,
                                         POS_DEV_LIMIT, overrides, model="model-last", gold_preproc=True)
                row = {"run": name, "lang": args.lang, "size": size, "features": feature, "seed": seed, "steps": size_steps,
                       "score": result["tag_acc"], "train_seconds": result["train_seconds"], "data": data_digest,
                       "test_words_per_second": result.get("speed")}
                if feature == "elmo":
                    row.update(weights=str(args.weights), weights_sha256=weights_digest, mixes=_mixes(RUNS / name / "model-last"))
                print(json.dumps(row), flush=True)
                with log.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row) + "\n")
    wanted = {f"{args.name}-pos-{size}-{feature}-seed{seed}": (size_steps, feature)
              for seed in args.seeds for size, size_steps in zip(args.sizes, steps) for feature in args.features}
    rows = {r["run"]: r for r in _pos_rows(log) if r["run"] in wanted and same(r, *wanted[r["run"]])}
    import spacy
    import torch

    report = {
        "task": "pos", "metric": "XPOS tag accuracy (spacy evaluate's tag_acc, gold tokens), points", "lang": args.lang,
        "train_conllu": str(args.train_conllu), "test_conllu": str(args.test_conllu), "data_sha256": data_digest, "data": stats,
        "features": {f: POS_FEATURES[f] for f in args.features},
        "weights": str(args.weights) if "elmo" in args.features else None, "weights_sha256": weights_digest,
        "protocol": {
            "sizes": list(args.sizes), "steps": dict(zip(map(str, args.sizes), steps)), "seeds": list(args.seeds),
            "model_scored": "model-last (a fixed step budget: no held-out sentences to select on)",
            "dev": "the run's own training file (spacy train needs one; its scores are not used)",
            "configs": "configs/downstream/tagger-{cnn,elmo}.cfg with nlp.lang set", "batch_words": 1000,
        },
        **pos_summary(list(rows.values()), args.sizes, args.features),
        "runs": sorted(rows.values(), key=lambda r: (r["size"], r["features"], r["seed"])),
        "command": "python scripts/downstream.py " + shlex.join(argv),
        "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "threads": 1, "torch": torch.__version__, "spacy": spacy.__version__},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    table = pos_table(report, args.lang)
    args.output.with_suffix(".md").write_text(table, encoding="utf-8")
    print(table)


def main(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--ud", default=str(HERE / "assets" / "data" / "ud_english_ewt"), help="UD English EWT folder (default: the project's assets)")
    p.add_argument("--wnut", default=str(HERE / "assets" / "data" / "wnut17_ner"), help="WNUT17 folder (default: the project's assets)")
    p = sub.add_parser("finetune")
    p.add_argument("--minutes", type=float, default=8.0)
    p = sub.add_parser("run")
    p.add_argument("--plan", choices=sorted(PLANS), default="full")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--models", nargs="+", default=["cnn", "elmo"], choices=["cnn", "elmo", "elmo-ewt"])
    p.add_argument("--tasks", nargs="+", default=["pos", "ner"], choices=["pos", "ner"])
    p.add_argument("--reclaim", action="store_true", help="redo runs claimed by a runner that was stopped before it finished them")
    p = sub.add_parser("report")
    p.add_argument("--plan", choices=sorted(PLANS), default="full")
    p = sub.add_parser("pos", help="POS on any language's CoNLL-U: CNN vs ElmoListener, per training size and seed")
    p.add_argument("--lang", required=True, help="spaCy language code of the pipelines (nlp.lang)")
    p.add_argument("--train-conllu", type=Path, required=True, help="CoNLL-U (.gz) whose first N sentences train the tagger")
    p.add_argument("--test-conllu", type=Path, required=True, help="CoNLL-U (.gz) the taggers are scored on, once")
    p.add_argument("--sizes", type=int, nargs="+", required=True, help="training sentences per run, e.g. 80 799")
    p.add_argument("--steps", type=int, nargs="+", required=True, help="training steps per size, e.g. 100 300 (the English 1%% and 10%% budgets)")
    p.add_argument("--weights", type=Path, default=None, help="biLM folder the elmo runs read")
    p.add_argument("--features", nargs="+", default=["cnn", "elmo"], choices=sorted(POS_FEATURES))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--name", required=True, help="names the converted data (corpus/downstream/NAME), the runs and their log")
    p.add_argument("--output", type=Path, required=True, help="summary JSON (and a markdown table beside it, .md)")
    argv = list(argv) or sys.argv[1:]
    args = parser.parse_args(argv)
    if args.command == "pos":
        pos(args, argv)
        return
    {"prepare": prepare, "finetune": finetune, "run": run, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
