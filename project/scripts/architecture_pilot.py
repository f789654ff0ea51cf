#!/usr/bin/env python3
"""The architecture pilot: an LSTM and a Transformer biLM trained for the same CPU time, side by side.

    python scripts/architecture_pilot.py curves lstm=training/pilot-arch-lstm transformer=training/pilot-arch-transformer \\
        --png ../docs/img/architecture-pilot.png --json ../bench/results/architecture-pilot.json
    python scripts/architecture_pilot.py speed lstm=training/pilot-arch-lstm/model transformer=training/pilot-arch-transformer/model \\
        --sentences SENTENCES.txt --json ../bench/results/architecture-pilot-speed.json

Each run is a ``pretrain`` folder whose config counts its budget on the CPU clock (``"clock": "cpu"``,
``configs/pilots/arch-*.json``): its ``metrics.jsonl`` holds validation perplexity (exact, full
softmax, the first ``eval_sentences`` validation sentences) against CPU minutes (``clock_minutes``).
Writes the plot of validation perplexity against CPU minutes for every run, and a JSON summary:
per run the architecture, its parameters (the biLM's, without the softmax, which both share in shape),
its tokens per CPU second, and the validation curve, so that the model card's table reads the same numbers.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List


def read_run(folder: Path) -> Dict[str, Any]:
    """A pilot run's settings, throughput and validation curve (on its CPU clock)."""
    config = json.loads((folder / "train_config.json").read_text())
    if config.get("clock") != "cpu":
        raise SystemExit(f"{folder}: the run's clock is {config.get('clock')!r}: a pilot's arms count CPU time (clock 'cpu')")
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    valid = [r for r in records if "valid_ppl_avg" in r]
    train = [r for r in records if "tokens_per_cpu_s" in r]
    parameters = None
    manifest = folder / "model" / "config.json"
    if manifest.is_file():
        from spacy_elmo import load_bilm

        parameters = sum(p.numel() for p in load_bilm(folder / "model").parameters())
    last = train[-1] if train else {}
    return {
        "architecture": config.get("architecture", "lstm"),
        "shape": {k: config.get(k) for k in ("lstm_dim", "projection_dim", "n_layers", "heads")},
        "precision": last.get("precision"),
        "budget_cpu_minutes": config.get("max_minutes"),
        "steps": last.get("step"),
        "tokens": last.get("tokens"),
        "tokens_per_cpu_s": sorted(r["tokens_per_cpu_s"] for r in train)[len(train) // 2] if train else None,
        "bilm_parameters": parameters,
        "valid": [{"step": r["step"], "tokens": r["tokens"], "cpu_minutes": r.get("clock_minutes"), "ppl_avg": r["valid_ppl_avg"]} for r in valid],
    }


DEFAULT_TITLE = "LSTM or Transformer biLM: validation perplexity per CPU minute"


def plot(runs: Dict[str, Dict[str, Any]], png: Path, title: str = DEFAULT_TITLE) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, run in runs.items():
        points = [(v["cpu_minutes"], v["ppl_avg"]) for v in run["valid"] if v["cpu_minutes"] is not None]
        ax.plot([x for x, _ in points], [y for _, y in points], "o-", markersize=4, label=f"{name} ({run['tokens_per_cpu_s']:,.0f} tokens / CPU-s)")
    ax.set_yscale("log")
    ax.set_xlabel("CPU minutes (one core)")
    ax.set_ylabel("validation perplexity (average of directions)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def speed(models: Dict[str, str], sentences: Path, rounds: int = 3, limit: int = 600) -> Dict[str, Any]:
    """Tokens/s of ``nlp.pipe`` through the ``elmo`` component, one thread, at batch 64 and at
    ``nlp.pipe``'s default batch, every model and batch in alternating turns in one process (best of
    ``rounds``), so that all see the same machine load."""
    import time

    import spacy
    import torch
    from spacy.tokens import Doc

    torch.set_num_threads(1)
    lines = [ln.split() for ln in sentences.read_text(encoding="utf-8").splitlines() if ln.strip()][:limit]
    tokens = sum(map(len, lines))
    pipes = {}
    for name, weights in models.items():
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": weights})
        nlp.initialize()
        pipes[name] = nlp
    best: Dict[str, float] = {}
    for _ in range(rounds):
        for name, nlp in pipes.items():
            for label, batch in (("batch_64", 64), ("pipe_default", None)):
                docs = [Doc(nlp.vocab, words=words) for words in lines]
                start = time.perf_counter()
                for _doc in (nlp.pipe(docs, batch_size=batch) if batch else nlp.pipe(docs)):
                    pass
                key = f"{name}/{label}"
                best[key] = min(best.get(key, float("inf")), time.perf_counter() - start)
    return {"tokens": tokens, "rounds": rounds, "tokens_per_s": {key: round(tokens / seconds, 1) for key, seconds in best.items()}}


def main(argv: List[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("curves", help="the plot and the JSON summary of the runs")
    c.add_argument("runs", nargs="+", help="NAME=RUN_FOLDER")
    c.add_argument("--png", type=Path, required=True)
    c.add_argument("--json", type=Path, required=True)
    c.add_argument("--title", default=DEFAULT_TITLE, help="the plot's title")
    v = sub.add_parser("speed", help="component tokens/s of each model at batch 64 and at nlp.pipe's default batch")
    v.add_argument("models", nargs="+", help="NAME=MODEL_FOLDER")
    v.add_argument("--sentences", type=Path, required=True, help="space-tokenised sentences, one a line (e.g. UD EWT test's)")
    v.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.command == "speed":
        models = dict(item.partition("=")[::2] for item in args.models)
        result = speed(models, args.sentences)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(json.dumps(result["tokens_per_s"], indent=1))
        return
    runs = {}
    for item in args.runs:
        name, _, folder = item.partition("=")
        if not folder:
            raise SystemExit(f"{item!r}: give NAME=RUN_FOLDER")
        runs[name] = read_run(Path(folder))
    plot(runs, args.png, args.title)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"runs": runs}, indent=1) + "\n", encoding="utf-8")
    for name, run in runs.items():
        best = min(run["valid"], key=lambda v: v["ppl_avg"]) if run["valid"] else None
        print(f"{name}: {run['tokens_per_cpu_s']:,.0f} tokens/CPU-s, {run['tokens']:,} tokens, last valid ppl "
              f"{run['valid'][-1]['ppl_avg']:.1f} at {run['valid'][-1]['cpu_minutes']:.1f} CPU-min (best {best['ppl_avg']:.1f})" if best else f"{name}: no validation yet")


if __name__ == "__main__":
    main()
