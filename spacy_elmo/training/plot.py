"""The learning-curve plot of a training run's metrics.jsonl (needs matplotlib, the ``train`` extra)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from tqdm import tqdm


def plot_learning_curve(metrics_path: Path, png_path: Path, max_step: Optional[int] = None) -> Optional[Path]:
    """Training and validation perplexity against tokens seen, up to ``max_step`` if given; None
    (and a note) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        tqdm.write("matplotlib is not installed: no learning-curve plot (pip install 'spacy-elmo[train]')")
        return None
    records = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    if max_step is not None:
        records = [r for r in records if r.get("step", 0) <= max_step]
    train = [r for r in records if "train_ppl_fwd" in r]
    valid = [r for r in records if "valid_ppl_fwd" in r]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, label, rows, style in (
        ("train_ppl_fwd", "train forward (as optimised: sampled softmax when on)", train, "-"),
        ("train_ppl_bwd", "train backward (as optimised)", train, "-"),
        ("valid_ppl_fwd", "valid forward", valid, "o--"),
        ("valid_ppl_bwd", "valid backward", valid, "s--"),
    ):
        if rows:
            ax.plot([r["tokens"] / 1e6 for r in rows], [r[key] for r in rows], style, label=label, markersize=4)
    ax.set_yscale("log")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("perplexity")
    ax.set_title("biLM learning curve")
    ax.grid(True, which="both", alpha=0.3)
    if ax.lines:
        ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path
