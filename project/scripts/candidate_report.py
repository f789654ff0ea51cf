#!/usr/bin/env python3
"""Every measure of the default model's ship rule for one candidate, in one JSON file.

    python scripts/candidate_report.py SNAPSHOT --ud corpus/ud-ewt --modern corpus/modern-test \\
        --books corpus/full-general --data-root assets/data --output metrics/candidate.json [--skip wsd,pos_1pct]

Each measure runs through the package's own command or the repository's bench script, so the
figures are the ones those commands print: held-out perplexity (``python -m spacy_elmo evaluate``,
exact full softmax, forward / backward / average) on UD EWT's, the modern text's and the books'
test split; WiC (``bench/wic.py``: threshold on train, layer or mix on dev, accuracy on test);
all-words WSD (``python -m spacy_elmo wsd``: nearest sense centroid, with and without the sense
prior, layer or mix on dev); the hand-written sense probe (``bench/senses.py``); the labelled
sense set (``bench/sense_set.py``: ARI with the number of senses fixed at the gold number); UD
EWT POS trained on 1% of its sentences (``scripts/downstream.py``'s 1% plan, seeds 0-2, after
``downstream.py prepare``; the CNN baseline's runs do not read the biLM, so its recorded score
stands).
Measures already in ``--output`` are kept (the report is written after each one), so an
interrupted report resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))  # downstream.py, beside this script
REPO = Path(__file__).resolve().parent.parent.parent
MEASURES = ("ud_ewt_test", "modern_test", "books_test", "wic", "wsd", "sense_probe", "sense_set", "pos_1pct")


def _run(cmd: List[str]) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def _json_of(cmd: List[str], flag: str) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        _run(cmd + [flag, str(out)])
        return json.loads(out.read_text(encoding="utf-8"))


def perplexity(model: str, corpus: Path, threads: int, common_with: Optional[str] = None) -> Dict[str, Any]:
    cmd = [sys.executable, "-m", "spacy_elmo", "evaluate", model, str(corpus), "--split", "test", "--threads", str(threads)]
    if common_with:
        cmd += ["--common-with", common_with]
    return _json_of(cmd, "--output")


def wic(model: str, data: Path, threads: int) -> Dict[str, Any]:
    return _json_of([sys.executable, str(REPO / "bench" / "wic.py"), "--weights", model, "--data", str(data), "--threads", str(threads)], "--json")


def wsd(model: str, data: Path, threads: int) -> Dict[str, Any]:
    report = _json_of([sys.executable, "-m", "spacy_elmo", "wsd", "--data", str(data), "--weights", model, "--threads", str(threads)], "--output")
    chosen = report["with_prior"]["chosen_on_dev"]
    return {
        "mfs_all": report["most_frequent_sense"]["ALL"]["F1"],
        "with_prior_all": report["with_prior"]["rows"][chosen]["scores"]["ALL"]["F1"],
        "with_prior_chosen_on_dev": chosen,
        "centroid_all": report["rows"][report["chosen_on_dev"]]["ALL"]["F1"],
        "centroid_chosen_on_dev": report["chosen_on_dev"],
        "report": report,
    }


def sense_probe(model: str) -> Dict[str, Any]:
    return json.loads(_run([sys.executable, str(REPO / "bench" / "senses.py"), "--weights", model, "--mix", "top", "--json"]))


def sense_set(model: str) -> Dict[str, Any]:
    script = REPO / "bench" / "sense_set.py"
    if not script.is_file():
        raise SystemExit(f"{script} not found: the labelled sense set's bench script is needed for this measure")
    return _json_of([sys.executable, str(script), "--weights", model, "--skip-induce"], "--json")


def pos_1pct(model: str, seeds: List[int]) -> Dict[str, Any]:
    """UD EWT POS with 1% of the training sentences (``downstream.py``'s 1% plan: ``spacy train`` 100
    steps, then ``spacy evaluate`` on test), the elmo tagger reading ``model``; one run per seed."""
    import statistics

    import downstream  # project/scripts, beside this file

    plan = next(p for p in downstream.PLANS["full"] if p["task"] == "pos" and p["subset"] == "1%")
    if not (downstream.DATA / plan["train"]).is_file():
        raise SystemExit(f"{downstream.DATA / plan['train']} not found: run `python scripts/downstream.py prepare` in the project first")
    tag = Path(model).resolve().name
    rows = [downstream._run_one(plan, "elmo", seed, f"candidate-{tag}-pos-1pct-seed{seed}", "full", weights=model) for seed in seeds]
    scores = [100 * r["score"] for r in rows]
    return {
        "scores": [round(v, 2) for v in scores],
        "mean": round(statistics.mean(scores), 2),
        "sd": round(statistics.stdev(scores), 2) if len(scores) > 1 else 0.0,
        "seeds": seeds,
        "runs": rows,
    }


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="model folder (a snapshot, ship's output) or en_default")
    ap.add_argument("--ud", type=Path, required=True, help="prepared UD EWT text corpus")
    ap.add_argument("--modern", type=Path, required=True, help="prepared modern-text corpus (its test split)")
    ap.add_argument("--books", type=Path, required=True, help="prepared books corpus (its test split)")
    ap.add_argument("--data-root", type=Path, required=True, help="folder with wic/ and wsd_raganato/")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--common-with", default=None, help="also score the perplexities over the words this model's vocabulary shares (e.g. en_default)"
    )
    ap.add_argument("--skip", default="", help="comma-separated measures to leave out: " + ", ".join(MEASURES))
    ap.add_argument("--output", type=Path, required=True)
    args = ap.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    unknown = skip - set(MEASURES)
    if unknown:
        raise SystemExit(f"--skip: unknown measures {sorted(unknown)}; known: {', '.join(MEASURES)}")
    model, t = args.model, args.threads
    jobs: Dict[str, Callable[[], Dict[str, Any]]] = {
        "ud_ewt_test": lambda: perplexity(model, args.ud, t, args.common_with),
        "modern_test": lambda: perplexity(model, args.modern, t, args.common_with),
        "books_test": lambda: perplexity(model, args.books, t, args.common_with),
        "wic": lambda: wic(model, args.data_root / "wic", t),
        "wsd": lambda: wsd(model, args.data_root / "wsd_raganato", t),
        "sense_probe": lambda: sense_probe(model),
        "sense_set": lambda: sense_set(model),
        "pos_1pct": lambda: pos_1pct(model, [0, 1, 2]),
    }
    report: Dict[str, Any] = json.loads(args.output.read_text(encoding="utf-8")) if args.output.is_file() else {}
    snapshot = Path(model) / "snapshot.json"
    if snapshot.is_file():
        report["snapshot"] = json.loads(snapshot.read_text(encoding="utf-8"))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for name, job in jobs.items():
        if name in skip or name in report:
            continue
        start = time.perf_counter()
        report[name] = job()
        report[name]["seconds"] = round(time.perf_counter() - start, 1)
        args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"{name}: done in {report[name]['seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
