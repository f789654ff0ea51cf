#!/usr/bin/env python3
"""The default's learning curve across its training legs: validation perplexity and the labelled
sense set's context-vector ARI against tokens seen.

    python scripts/default_curve.py training/default-v2/metrics.jsonl ../bench/results/candidate-v2-*.json \\
        --out ../docs/images/default-v2-curve.png

Validation perplexity comes from the run's ``metrics.jsonl`` (the trainer's own evaluations on
the first validation sentences); the ARI from each snapshot's ``candidate_report.py`` report
(``sense_set.features``: k-means at the gold number of senses over the context vectors), placed
at the tokens its ``snapshot`` record names. Reports without that measure are left out; with no
report and no ``--shipped`` (a run of another language, ``--title`` naming it) the plot is the
validation perplexity alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional, Tuple

CONTEXT_FEATURE = "context words, with the LM head's output embeddings (the context representation)"


def validation_points(metrics: Path, offset: float = 0) -> List[Tuple[float, float]]:
    """(tokens, average validation perplexity) for each evaluation of the run, in order; ``offset``
    tokens are added (a leg that continues a model which had already seen them)."""
    points = []
    for line in metrics.read_text(encoding="utf-8").splitlines():
        record = json.loads(line) if line.strip() else {}
        if "valid_ppl_avg" in record:
            points.append((record["tokens"] + offset, record["valid_ppl_avg"]))
    return points


def ari_points(reports: List[Path]) -> List[Tuple[float, float, int]]:
    """(tokens, context-vector ARI, step) of each report that holds both, by tokens."""
    points = []
    for path in reports:
        report = json.loads(path.read_text(encoding="utf-8"))
        feature = report.get("sense_set", {}).get("features", {}).get(CONTEXT_FEATURE)
        snapshot = report.get("snapshot", {})
        if feature is not None and "tokens" in snapshot:
            points.append((snapshot["tokens"], feature["ari_gold"], snapshot.get("step", 0)))
    return sorted(points)


TITLE = "the default's v2 run: what more tokens buy"


def plot(valid: List[Tuple[float, float]], ari: List[Tuple[float, float, int]], out: Path, shipped_ari: Optional[float],
         title: str = TITLE) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    alone = not ari and shipped_ari is None  # nothing for the ARI panel: the validation perplexity alone
    if alone:
        fig, top = plt.subplots(figsize=(7, 3.6))
        top.set_xlabel("training tokens seen (millions)")
    else:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    top.plot([t / 1e6 for t, _ in valid], [p for _, p in valid], "o-", markersize=3)
    top.set_yscale("log")
    top.set_ylabel("validation perplexity (avg)")
    top.set_title(title)
    if alone:
        return _save(fig, out)
    bottom.plot([t / 1e6 for t, _, _ in ari], [a for _, a, _ in ari], "s-", color="tab:green", label="v2 snapshots")
    for tokens, value, step in ari:
        bottom.annotate(f"step {step:,}", (tokens / 1e6, value), textcoords="offset points", xytext=(4, -12), fontsize=8)
    if shipped_ari is not None:
        bottom.axhline(shipped_ari, color="grey", linestyle="--", label=f"the previous default ({shipped_ari:.2f})")
    bottom.set_ylim(0, 1)
    bottom.set_ylabel("labelled set ARI, context vectors")
    bottom.set_xlabel("training tokens seen (millions)")
    bottom.legend(loc="lower right")
    return _save(fig, out)


def _save(fig, out: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("metrics", type=Path, help="the run's metrics.jsonl")
    ap.add_argument("reports", type=Path, nargs="*", help="candidate_report.py outputs of the run's snapshots")
    ap.add_argument("--shipped", type=Path, default=None, help="the previous default's report, drawn as a line")
    ap.add_argument("--title", default=TITLE, help="the plot's title (default: the English default's v2 run)")
    ap.add_argument("--offset-tokens", type=float, default=0, help="tokens the run's starting model had seen (a continuing leg)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not args.metrics.is_file():
        raise SystemExit(f"{args.metrics} not found: pass the run folder's metrics.jsonl")
    shipped = None
    if args.shipped is not None:
        feature = json.loads(args.shipped.read_text(encoding="utf-8")).get("sense_set", {}).get("features", {}).get(CONTEXT_FEATURE)
        shipped = None if feature is None else feature["ari_gold"]
    print(plot(validation_points(args.metrics, args.offset_tokens), ari_points(args.reports), args.out, shipped, args.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
