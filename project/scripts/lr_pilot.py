#!/usr/bin/env python3
"""The legs' pilots: validation perplexity of legs that differ in one setting (peak rate, dropout).

    python scripts/lr_pilot.py "1e-4=training/pilot-leg-lr-1e-4" "3e-4=training/pilot-leg-lr-3e-4" \\
        "1e-3=training/pilot-leg-lr-1e-3" --start 105.3 --png ../docs/img/leg-lr-pilot.png --json ../bench/results/leg-lr-pilot.json

Each arm is a ``finetune`` folder continuing the same model with the same seed (so the same batches
in the same order) and step budget, with ``configs/pilots/leg-lr-*.json`` (or ``leg-dropout-0.json``
beside a leg of ``configs/default-v2-continue.json``: ``--label "dropout {}" --title ...``). ``metrics.jsonl`` holds
the validation perplexity (exact, full softmax, the first ``eval_sentences`` validation sentences)
every ``eval_every`` steps. Arms of different speeds (a leg and the same leg widened, ``spacy_elmo
widen``) compare per minute of one core: ``--x minutes``. Writes a JSON summary (per arm: its peak rate, its steps, tokens and
minutes, its validation curve) and a plot of the curves against training tokens, with the starting
model's perplexity (``--start``) as a line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Optional


def read_arm(folder: Path) -> Dict[str, Any]:
    """An arm's settings and validation curve."""
    config = json.loads((folder / "train_config.json").read_text())
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    valid = list({r["step"]: r for r in records if "valid_ppl_avg" in r}.values())  # the end's evaluation is logged twice
    train = [r for r in records if "loss" in r]
    if not valid:
        raise SystemExit(f"{folder}: no validation perplexity in metrics.jsonl yet")
    return {
        "lr": config["lr"],
        "dropout": config.get("dropout"),
        "seed": config["seed"],
        "max_steps": config["max_steps"],
        "steps": train[-1]["step"] if train else None,
        "tokens": train[-1]["tokens"] if train else None,
        "minutes": round(train[-1]["elapsed_s"] / 60.0, 1) if train else None,
        "valid": [
            {
                "step": r["step"],
                "tokens": r["tokens"],
                "minutes": round(r["clock_minutes"], 2) if "clock_minutes" in r else None,
                "ppl_avg": round(r["valid_ppl_avg"], 3),
            }
            for r in valid
        ],
    }


X_AXES = {"tokens": ("tokens", 1e6, "training tokens in the leg (millions)"), "minutes": ("minutes", 1.0, "minutes of one core in the leg")}


def plot(arms: Dict[str, Dict[str, Any]], start: Optional[float], png: Path, label: str, title: str, x: str = "tokens") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, arm in arms.items():
        key, unit, _ = X_AXES[x]
        xs = ([0.0] if start else []) + [v[key] / unit for v in arm["valid"]]
        ys = ([start] if start else []) + [v["ppl_avg"] for v in arm["valid"]]
        ax.plot(xs, ys, marker="o", label=label.format(name))
    if start:
        ax.axhline(start, color="grey", linestyle=":", linewidth=1, label=f"start ({start:g})")
    ax.set_xlabel(X_AXES[x][2])
    ax.set_ylabel("validation perplexity (first 1,000 sentences)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("arms", nargs="+", help="NAME=RUN_FOLDER, one per arm")
    parser.add_argument("--start", type=float, default=None, help="the starting model's validation perplexity, drawn as a line")
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--label", default="peak lr {}", help="each arm's legend, its NAME in place of {}")
    parser.add_argument("--title", default="A leg of the default: its peak learning rate")
    parser.add_argument(
        "--x",
        choices=sorted(X_AXES),
        default="tokens",
        help="the plot's x axis: the leg's tokens, or its minutes on one core (arms of other speeds)",
    )
    args = parser.parse_args(argv)
    arms = {}
    for spec in args.arms:
        name, sep, folder = spec.partition("=")
        if not sep:
            raise SystemExit(f"{spec!r}: write each arm as NAME=RUN_FOLDER")
        arms[name] = read_arm(Path(folder))
    for name, arm in arms.items():
        curve = ", ".join(f"{v['ppl_avg']:.2f} at {v['step']:,}" for v in arm["valid"])
        print(f"{args.label.format(name)}: {curve} ({arm['tokens']:,} tokens, {arm['minutes']} minutes)")
    if args.json:
        args.json.write_text(json.dumps({"start_valid_ppl": args.start, "arms": arms}, indent=1) + "\n")
    if args.png:
        if args.x == "minutes" and any(v["minutes"] is None for arm in arms.values() for v in arm["valid"]):
            raise SystemExit("--x minutes: an arm's metrics.jsonl has no clock_minutes on its validation rows")
        plot(arms, args.start, args.png, args.label, args.title, args.x)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
