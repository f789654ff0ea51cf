#!/usr/bin/env python3
"""int8 against float32 at the task level: WiC, all-words WSD with the prior, the sense probe, induce.

    OMP_NUM_THREADS=1 python bench/int8_tasks.py --wic DATA/wic --wsd DATA/wsd_raganato [--weights M] --out DIR
    python bench/int8_tasks.py --out DIR --compare-only    # the comparison of reports already in DIR

Each task runs once per precision through the package's own commands (``wic``, ``wsd``,
``sense-probe --mix top``, each with ``--precision``; and ``bench/sense_set.py --induce-only``,
``induce`` on the labelled sense set), their reports kept in ``--out``
(``TASK-PRECISION.json``; a report already there is reused, so an interrupted run resumes). The
comparison (``--out``/comparison.json and .md) gives each task's score at both precisions and the
paired difference over the same test items with its 95% bootstrap interval and the number of items
that differ (``spacy_elmo.evaluation.items``): once as each precision chose its layer or mix on
dev (what a user gets), and, for WSD, row by row at the same mix (what the vectors change).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

from bench_common import machine, write_results

PRECISIONS = ("float32", "int8")


def run_tasks(args: argparse.Namespace) -> None:
    """Each task's report at each precision, into ``args.out`` (skipping those already there)."""
    weights = ["--weights", args.weights] if args.weights else []
    commands = {
        "wic": ["wic", "--data", str(args.wic), *weights, "--threads", "1"],
        "wsd": ["wsd", "--data", str(args.wsd), *weights, "--threads", "1"],
        "probe": ["sense-probe", "--mix", "top", *weights, "--threads", "1"],
    }
    sense_set = [str(Path(__file__).resolve().parent / "sense_set.py"), "--induce-only", *weights]
    for precision in PRECISIONS:
        for task, command in commands.items():
            report = args.out / f"{task}-{precision}.json"
            if report.is_file():
                continue
            print(f"{task} at {precision}", flush=True)
            subprocess.run([sys.executable, "-m", "spacy_elmo", *command, "--precision", precision, "--output", str(report)], check=True)
        report = args.out / f"induce-{precision}.json"
        if not report.is_file():
            print(f"induce on the labelled set at {precision}", flush=True)
            subprocess.run([sys.executable, *sense_set, "--precision", precision, "--json", str(report)], check=True)


def compare(out: Path) -> Dict[str, Any]:
    """The paired comparison of the reports in ``out``."""
    from spacy_elmo.evaluation.items import paired_difference

    def load(task: str) -> Dict[str, Any]:
        return {p: json.loads((out / f"{task}-{p}.json").read_text(encoding="utf-8")) for p in PRECISIONS}

    wic, wsd, probe = load("wic"), load("wsd"), load("probe")
    result: Dict[str, Any] = {
        "wic": {
            **{p: {"test": 100 * r["test_accuracy"], "chosen_on_dev": r["chosen_on_dev"]} for p, r in wic.items()},
            "paired": paired_difference(wic["int8"]["test_correct"], wic["float32"]["test_correct"]),
        },
        "probe": {
            **{p: {"accuracy": 100 * r["overall_accuracy"]} for p, r in probe.items()},
            "paired": paired_difference(probe["int8"]["correct"], probe["float32"]["correct"]),
        },
    }
    rows = {p: r["with_prior"]["rows"] for p, r in wsd.items()}
    chosen = {p: r["with_prior"]["chosen_on_dev"] for p, r in wsd.items()}
    result["wsd"] = {
        **{p: {"all_f1": rows[p][chosen[p]]["scores"]["ALL"]["F1"], "chosen_on_dev": chosen[p]} for p in PRECISIONS},
        "paired": paired_difference(rows["int8"][chosen["int8"]]["test_correct"], rows["float32"][chosen["float32"]]["test_correct"]),
        "same_mix": {
            name: {
                "float32": rows["float32"][name]["scores"]["ALL"]["F1"],
                "int8": rows["int8"][name]["scores"]["ALL"]["F1"],
                "dev_float32": rows["float32"][name]["scores"]["semeval2007"]["F1"],
                "dev_int8": rows["int8"][name]["scores"]["semeval2007"]["F1"],
                "paired": paired_difference(rows["int8"][name]["test_correct"], rows["float32"][name]["test_correct"]),
            }
            for name in rows["float32"]
        },
    }
    induced = out / "induce-float32.json"
    if induced.is_file() and (out / "induce-int8.json").is_file():  # `induce` on the labelled set (bench/sense_set.py)
        from spacy_elmo.induction.clustering import adjusted_rand

        runs = {p: {w["word"]: w for w in json.loads((out / f"induce-{p}.json").read_text(encoding="utf-8"))["induce"]["per_word"]} for p in PRECISIONS}
        words = sorted(runs["float32"])
        between = {w: adjusted_rand(runs["float32"][w]["labels"], runs["int8"][w]["labels"]) for w in words}
        result["induce"] = {
            "ari_between_precisions": between,
            "words_induced_alike": sum(runs["float32"][w]["labels"] == runs["int8"][w]["labels"] for w in words),
            "words": len(words),
            **{p: {"mean_ari": json.loads((out / f"induce-{p}.json").read_text(encoding="utf-8"))["induce"]["mean_ari"]} for p in PRECISIONS},
        }
    return result


def table(result: Dict[str, Any]) -> str:
    def paired(p: Dict[str, Any]) -> str:
        return f"{p['difference']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}], {p['disagreements']} of {p['items']} differ"

    lines = ["| task | float32 | int8 | int8 - float32, paired |", "| --- | ---: | ---: | --- |"]
    w, s, p = result["wic"], result["wsd"], result["probe"]
    lines.append(f"| WiC test (mix chosen on dev) | {w['float32']['test']:.2f} ({w['float32']['chosen_on_dev']}) | {w['int8']['test']:.2f} ({w['int8']['chosen_on_dev']}) | {paired(w['paired'])} |")
    lines.append(f"| WSD with the prior, ALL F1 (mix chosen on dev) | {s['float32']['all_f1']:.2f} ({s['float32']['chosen_on_dev']}) | {s['int8']['all_f1']:.2f} ({s['int8']['chosen_on_dev']}) | {paired(s['paired'])} |")
    for name, row in s["same_mix"].items():
        lines.append(f"| WSD with the prior, {name} (dev {row['dev_float32']:.2f} / {row['dev_int8']:.2f}) | {row['float32']:.2f} | {row['int8']:.2f} | {paired(row['paired'])} |")
    lines.append(f"| sense probe, mix top | {p['float32']['accuracy']:.2f} | {p['int8']['accuracy']:.2f} | {paired(p['paired'])} |")
    if "induce" in result:
        i = result["induce"]
        lines.append(
            f"| induce, labelled set: mean ARI against the senses | {i['float32']['mean_ari']:.3f} | {i['int8']['mean_ari']:.3f} | "
            f"{i['words_induced_alike']} of {i['words']} words induced alike (lowest ARI between the two: {min(i['ari_between_precisions'].values()):.3f}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv: List[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder of the task reports and the comparison")
    parser.add_argument("--wic", type=Path, help="WiC folder")
    parser.add_argument("--wsd", type=Path, help="Raganato WSD framework folder")
    parser.add_argument("--weights", default=None, help="the biLM (default: the embedded default)")
    parser.add_argument("--compare-only", action="store_true", help="compare the reports already in --out; run nothing")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.compare_only:
        if args.wic is None or args.wsd is None:
            parser.error("--wic and --wsd are needed unless --compare-only")
        run_tasks(args)
    result = compare(args.out)
    result.update({"machine": machine(1), "weights": args.weights or "en_default"})
    write_results(args.out / "comparison.json", result, table(result))


if __name__ == "__main__":
    main()
