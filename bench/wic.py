#!/usr/bin/env python3
"""WiC (word in context) with a biLM and no training: cosine of the target word's two vectors.

The evaluation lives in ``spacy_elmo.evaluation.wic`` (also ``python -m spacy_elmo wic``): threshold
per layer/mix chosen on train, the layer/mix on dev, accuracy on test.

    python bench/wic.py [--weights PATH] [--data project/assets/data/wic] [--json OUT]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spacy_elmo.evaluation.wic import DEFAULT_WIC_DIR, evaluate, table
from bench_common import add_threads, use_threads, write_results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="model directory (default: the embedded default model)")
    ap.add_argument("--data", type=Path, default=DEFAULT_WIC_DIR)
    add_threads(ap, default=0)
    ap.add_argument("--json", type=Path, help="also write the report here")
    args = ap.parse_args()
    use_threads(args.threads)
    report = evaluate(args.weights, args.data)
    print(table(report))
    print(f"\nWiC test accuracy: {100 * report['test_accuracy']:.1f} ({report['chosen_on_dev']}, chosen on dev; "
          f"threshold from train; {report['pairs']['test']} test pairs; {report['seconds']:.0f} s)", file=sys.stderr)
    if args.json:
        write_results(args.json, report)


if __name__ == "__main__":
    main()
