#!/usr/bin/env python3
"""Downstream experiments: spaCy's CNN tok2vec vs the same task model with an ElmoListener.

    python scripts/downstream.py prepare  [--ud DIR] [--wnut DIR]       # .spacy files, nested subsets
    python scripts/downstream.py finetune [--minutes 8]                 # the default biLM tuned on EWT train text
    python scripts/downstream.py run      [--plan full|tiny] [--seeds 0 1 2]
    python scripts/downstream.py report                                  # metrics/downstream.{json,md}

Every run trains with ``spacy train`` (same optimizer, steps and seeds for both models; the model
is selected on dev) and is scored once on test with ``spacy evaluate``. Finished runs are kept in
``metrics/downstream-runs.jsonl`` and skipped when ``run`` is started again, so an interrupted
workflow resumes where it stopped. Each run uses one thread.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

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


def _run_one(plan: Dict[str, Any], model: str, seed: int, name: str, tag: str, weights: str = "") -> Dict[str, Any]:
    """One ``spacy train`` + ``spacy evaluate`` run; ``weights`` (a model folder) replaces the elmo
    config's biLM (the embedded default) for an ``elmo`` run."""
    task = plan["task"]
    data = DATA / ("ud" if task == "pos" else "wnut")
    config = HERE / "configs" / "downstream" / f"{CONFIGS[task]}-{'cnn' if model == 'cnn' else 'elmo'}.cfg"
    out = RUNS / name
    cmd = [
        sys.executable, "-m", "spacy", "train", str(config), "--output", str(out),
        "--paths.train", str(DATA / plan["train"]), "--paths.dev", str(data / "dev.spacy"),
        "--system.seed", str(seed), "--training.max_steps", str(plan["steps"]),
        "--training.eval_frequency", str(plan["eval"]), "--corpora.dev.limit", str(DEV_LIMIT[tag]),
    ]
    if model == "elmo-ewt":
        cmd += ["--components.elmo.model.weights", str(FINETUNED)]
    elif weights and model == "elmo":
        cmd += ["--components.elmo.model.weights", str(weights)]
    start = time.time()
    subprocess.run(cmd, check=True, env=_env(), stdout=subprocess.DEVNULL)
    train_s = time.time() - start
    scores = out / "test-scores.json"
    subprocess.run([sys.executable, "-m", "spacy", "evaluate", str(out / "model-best"), str(data / "test.spacy"),
                    "--output", str(scores)], check=True, env=_env(), stdout=subprocess.DEVNULL)
    result = json.loads(scores.read_text())
    row = {"run": name, "task": task, "subset": plan["subset"], "model": model, "seed": seed,
           "score": result[SCORE[task]], "train_seconds": round(train_s, 1), "steps": plan["steps"],
           "test_words_per_second": result.get("speed")}
    if model != "cnn":
        import spacy

        sys.path.insert(0, str(HERE.parent))
        from spacy_elmo.layers import learned_mixes

        nlp = spacy.load(out / "model-best")
        row["mixes"] = learned_mixes(nlp)
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


def main() -> None:
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
    args = parser.parse_args()
    {"prepare": prepare, "finetune": finetune, "run": run, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
