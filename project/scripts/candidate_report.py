#!/usr/bin/env python3
"""Every measure of the default model's ship rule for one candidate, in one JSON file.

    python scripts/candidate_report.py SNAPSHOT --ud corpus/ud-ewt --modern corpus/modern-test \\
        --books corpus/full-general --data-root assets/data --output metrics/candidate.json [--skip wsd,pos_1pct]

Each measure runs through the package's own command or the repository's bench script, so the
figures are the ones those commands print: held-out perplexity (``python -m spacy_elmo evaluate``,
exact full softmax, forward / backward / average) on UD EWT's, the modern text's and the books'
test split; WiC (``spacy_elmo wic``: threshold on train, layer or mix on dev, accuracy on test);
all-words WSD (``python -m spacy_elmo wsd``: nearest sense centroid, with and without the sense
prior, layer or mix on dev); the hand-written sense probe (``python -m spacy_elmo sense-probe``); the labelled
sense set (``bench/sense_set.py``: ARI with the number of senses fixed at the gold number); UD
EWT POS trained on 1% of its sentences (``scripts/downstream.py``'s 1% plan, seeds 0-2, after
``downstream.py prepare``; the CNN baseline's runs do not read the biLM, so its recorded score
stands); the component's speed beside the shipped default's, timed in turns in one process
(``component_speed``); the model files' size.

The ship rule (docs/model-card.md, "The ship rule") is applied against the shipped default's
report (``--baseline``, by default ``bench/results/shipped-default.json``): the script ends by
printing ``SHIP`` or ``NOT SHIP`` and each failing row, and ``--rule-only`` applies it to an
existing report without measuring anything. A candidate ships when it is better than the shipped
default by a margin on modern-English perplexity over common events or on the labelled set from
context vectors, and holds every fixed floor (:data:`BETTER_BY`, :data:`FLOORS`); rows whose test
items both reports score one by one carry a paired bootstrap interval of the difference.
Measures already in ``--output`` are kept (the report is written after each one), so an
interrupted report resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # downstream.py, beside this script
REPO = Path(__file__).resolve().parent.parent.parent
MEASURES = (
    "ud_ewt_test",
    "modern_test",
    "books_test",
    "wic",
    "wsd",
    "sense_probe",
    "sense_set",
    "pos_1pct",
    "component_speed",
    "model_files",
)
DEFAULT_BASELINE = REPO / "bench" / "results" / "shipped-default.json"
CONTEXT_FEATURE = "context words, with the LM head's output embeddings (the context representation)"
# the ship rule (docs/model-card.md, "The ship rule"): better than the shipped default on one of
# these, by at least this much ...
BETTER_BY = {
    "modern_common": 0.02,  # modern perplexity over common events: at least 2% lower (relative)
    "context_ari": 0.03,  # the labelled set's context-vector ARI at the gold k: at least 0.03 higher (absolute)
}
# ... and at or above every fixed floor (not a comparison with one draw of the shipped model's)
FLOORS = {
    "wic": 53.5,  # WiC test accuracy, %
    "wsd": 61.2,  # all-words WSD ALL F1 with the prior, %: the most frequent sense (59.7) + 1.5
    "sense_probe_items": 222,  # the hand-written probe: items right of its 288 (77%)
    "pos_mean": 84.0,  # UD EWT POS from 1% of its sentences, mean of seeds 0-2, %
    "speed_ratio": 0.95,  # component tokens/s as a fraction of the shipped default's, same run
}
MAX_MODEL_MB = 60.0
# the rows whose test items both reports score one by one: shown with a paired bootstrap interval
PAIRED = {"wic": ("wic", "test_correct"), "wsd": ("wsd", "with_prior_test_correct"), "sense_probe": ("sense_probe", "correct")}


def _run(cmd: List[str]) -> str:
    result = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    )
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
    return _json_of(
        [sys.executable, "-m", "spacy_elmo", "wic", "--weights", model, "--data", str(data), "--threads", str(threads)], "--output"
    )


def wsd(model: str, data: Path, threads: int) -> Dict[str, Any]:
    report = _json_of(
        [sys.executable, "-m", "spacy_elmo", "wsd", "--data", str(data), "--weights", model, "--threads", str(threads)], "--output"
    )
    chosen = report["with_prior"]["chosen_on_dev"]
    return {
        "mfs_all": report["most_frequent_sense"]["ALL"]["F1"],
        "with_prior_all": report["with_prior"]["rows"][chosen]["scores"]["ALL"]["F1"],
        "with_prior_test_correct": report["with_prior"]["rows"][chosen].get("test_correct"),
        "with_prior_chosen_on_dev": chosen,
        "centroid_all": report["rows"][report["chosen_on_dev"]]["ALL"]["F1"],
        "centroid_chosen_on_dev": report["chosen_on_dev"],
        "report": report,
    }


def sense_probe(model: str) -> Dict[str, Any]:
    return _json_of([sys.executable, "-m", "spacy_elmo", "sense-probe", "--weights", model, "--mix", "top"], "--output")


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


def component_speed(model: str, baseline_model: str, sentences: Path, rounds: int = 7, limit: int = 600) -> Dict[str, Any]:
    """Tokens/s of ``nlp.pipe`` through the ``elmo`` component for ``model`` and ``baseline_model``
    on the same sentences, one thread, timed in turns in one process so that both see the same
    machine load: each of ``rounds`` rounds times both (the order alternating between rounds), and
    the ratio is the median of the rounds' ratios (one round's noise, or a best-of taken from one
    lucky run, does not decide the row; three separate best-of-3 draws for two models of one shape
    once gave 0.933, 1.046 and 1.020)."""
    import spacy
    import torch
    from spacy.tokens import Doc

    torch.set_num_threads(1)
    lines = [ln.split() for ln in sentences.read_text(encoding="utf-8").splitlines() if ln.strip()][:limit]
    pipes = {}
    for name, weights in (("candidate", model), ("baseline", baseline_model)):
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": None if weights == "en_default" else weights})
        nlp.initialize()
        pipes[name] = nlp
    tokens = sum(len(words) for words in lines)
    seconds: Dict[str, List[float]] = {name: [] for name in pipes}
    for turn in range(rounds):
        for name in sorted(pipes, reverse=bool(turn % 2)):
            nlp = pipes[name]
            docs = [Doc(nlp.vocab, words=words) for words in lines]
            start = time.perf_counter()
            for _doc in nlp.pipe(docs, batch_size=64):
                pass
            seconds[name].append(time.perf_counter() - start)
    ratios = [b / c for c, b in zip(seconds["candidate"], seconds["baseline"])]  # candidate's speed over the baseline's
    return {
        "tokens": tokens,
        "tokens_per_s": round(tokens / statistics.median(seconds["candidate"]), 1),
        "baseline_tokens_per_s": round(tokens / statistics.median(seconds["baseline"]), 1),
        "ratio": round(statistics.median(ratios), 4),
        "round_ratios": [round(r, 4) for r in ratios],
        "baseline": baseline_model,
        "rounds": rounds,
    }


def model_files(model: str) -> Dict[str, Any]:
    """The size of the files a shipped model folder holds (what the wheel carries), in MB."""
    folder = Path(model)
    if model == "en_default":
        from spacy_elmo.models import default_model_path

        folder = Path(default_model_path())
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    return {"files": files, "mb": round(sum(files.values()) / 1e6, 2)}


def _figures(report: Dict[str, Any]) -> Dict[str, Optional[float]]:
    """The rule's figures from one report (None where the report lacks the measure)."""

    def get(*keys: str) -> Optional[float]:
        node: Any = report
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return float(node) if isinstance(node, (int, float)) else None

    wic_test = get("wic", "test_accuracy")
    probe = get("sense_probe", "overall_accuracy")
    return {
        "modern_common": get("modern_test", "common", "ppl_avg"),
        "modern_common_types": get("modern_test", "common", "common_types"),
        "context_ari": get("sense_set", "features", CONTEXT_FEATURE, "ari_gold"),
        "wic": None if wic_test is None else 100 * wic_test,
        "wsd": get("wsd", "with_prior_all"),
        "sense_probe": None if probe is None else 100 * probe,
        "pos_mean": get("pos_1pct", "mean"),
        "pos_sd": get("pos_1pct", "sd"),
        "speed_ratio": get("component_speed", "ratio"),
        "model_mb": get("model_files", "mb"),
        "books": get("books_test", "common", "ppl_avg") or get("books_test", "ppl_avg"),
    }


def probe_items() -> int:
    """How many sentences the hand-written sense probe scores (the denominator of its floor), read
    from the probe's data file (no import of the package: ``--rule-only`` stays light)."""
    probe = json.loads((REPO / "spacy_elmo" / "evaluation" / "sense_probe.json").read_text(encoding="utf-8"))
    return sum(len(sentences) for senses in probe.values() for sentences in senses.values())


def _items(report: Dict[str, Any], key: str) -> Optional[str]:
    section, field = PAIRED[key]
    value = report.get(section, {}).get(field) if isinstance(report.get(section), dict) else None
    return value if isinstance(value, str) and value else None


def paired(candidate: Dict[str, Any], baseline: Dict[str, Any], key: str) -> Optional[Dict[str, float]]:
    """The paired difference on ``key``'s test items (candidate - shipped, points, 95% bootstrap
    interval), or None where either report lacks the per-item outcomes or they cover other items."""
    c, b = _items(candidate, key), _items(baseline, key)
    if c is None or b is None or len(c) != len(b):
        return None
    from spacy_elmo.evaluation.items import paired_difference

    return paired_difference(c, b)


def paired_ari(candidate: Dict[str, Any], baseline: Dict[str, Any]) -> Optional[Dict[str, float]]:
    """The context-vector ARI's paired difference over the labelled set's words (candidate - shipped,
    95% bootstrap interval over the words), or None where either report lacks the per-word ARIs
    or they cover other words."""
    c, b = (r.get("sense_set", {}).get("features", {}).get(CONTEXT_FEATURE, {}).get("per_word") for r in (candidate, baseline))
    if not isinstance(c, dict) or not isinstance(b, dict) or not c or sorted(c) != sorted(b):
        return None
    from spacy_elmo.evaluation.items import paired_mean_difference

    words = sorted(c)
    return paired_mean_difference([c[w] for w in words], [b[w] for w in words])


def ship_rule(candidate: Dict[str, Any], baseline: Dict[str, Any]) -> Tuple[bool, List[str], List[str]]:
    """Apply the ship rule: (ships, failing rows, passing rows), each row one line naming its figures.

    A candidate ships when it is better than the shipped default on modern-English perplexity over
    common events by at least 2% (the candidate's ``modern_test.common`` against the baseline's own
    figure over the same words) or on the labelled set's context-vector ARI by at least 0.03
    (:data:`BETTER_BY`), and holds every fixed floor (:data:`FLOORS`): WiC >= 53.5, WSD with the
    prior >= 61.2, the sense probe >= 222 of 288 items, 1% POS mean >= 84.0, component tokens/s >=
    0.95 of the shipped default's, model files <= 60 MB. Each row shows the shipped default's figure
    beside the candidate's, with a paired 95% bootstrap interval of the difference where both
    reports hold per-item outcomes on the same test items (reported; the floors are the gate). A
    measure missing from the candidate's report fails its row (nothing ships on a figure nobody
    measured). Books perplexity is reported, not gated."""
    c, b = _figures(candidate), _figures(baseline)
    failing: List[str] = []
    passing: List[str] = []

    def row(ok: bool, text: str) -> None:
        (passing if ok else failing).append(text)

    def shipped(value: Optional[float], fmt: str) -> str:
        return "shipped not measured" if value is None else f"shipped {value:{fmt}}"

    better = []
    same_words = None in (c["modern_common_types"], b["modern_common_types"]) or c["modern_common_types"] == b["modern_common_types"]
    if c["modern_common"] is not None and b["modern_common"] is not None and not same_words:
        passing.append(
            f"modern perplexity over common events: not compared, the two reports hold different words in common"
            f" ({c['modern_common_types']:.0f} and {b['modern_common_types']:.0f} types: pass the same --common-with)"
        )
    elif c["modern_common"] is not None and b["modern_common"] is not None:
        gain = 1 - c["modern_common"] / b["modern_common"]
        better.append(gain >= BETTER_BY["modern_common"] - 1e-9)
        row(
            True,
            f"modern perplexity over common events: {c['modern_common']:.2f} (shipped {b['modern_common']:.2f}, "
            f"{100 * gain:.2f}% lower; needs {100 * BETTER_BY['modern_common']:g}%{'' if better[-1] else ', short of it'})",
        )
    if c["context_ari"] is not None and b["context_ari"] is not None:
        gain = c["context_ari"] - b["context_ari"]
        better.append(gain >= BETTER_BY["context_ari"] - 1e-9)
        by_word = paired_ari(candidate, baseline)
        interval = "" if by_word is None else f"; paired over its {by_word['items']} words [{by_word['low']:+.3f}, {by_word['high']:+.3f}]"
        row(
            True,
            f"labelled set from context vectors, ARI: {c['context_ari']:.3f} (shipped {b['context_ari']:.3f}, "
            f"{gain:+.3f}; needs +{BETTER_BY['context_ari']:g}{interval}{'' if better[-1] else ', short of it'})",
        )
    row(
        any(better),
        "better by the margin on modern perplexity over common events or on the context-vector ARI"
        + ("" if better else ": neither measured"),
    )
    n_probe = probe_items()
    floors = (
        ("wic", "WiC test", FLOORS["wic"], ".1f"),
        ("wsd", "WSD with the prior", FLOORS["wsd"], ".1f"),
        ("sense_probe", "sense probe", 100 * FLOORS["sense_probe_items"] / n_probe, ".1f"),
    )
    for key, label, floor, fmt in floors:
        cv = c[key]
        if cv is None:
            row(False, f"{label}: not measured")
            continue
        text = f"{label}: {cv:{fmt}} ({shipped(b[key], fmt)}; floor {floor:{fmt}}"
        if key == "sense_probe":
            text += f" = {FLOORS['sense_probe_items']} of {n_probe}; {round(cv * n_probe / 100)} of {n_probe} right"
        interval = paired(candidate, baseline, key)
        if interval is not None:
            text += (
                f"; paired difference {interval['difference']:+.2f} [{interval['low']:+.2f}, {interval['high']:+.2f}]"
                f" over {interval['items']} items, {interval['disagreements']} disagreements"
            )
        row(cv >= floor - 1e-9, text + ")")
    if c["pos_mean"] is None:
        row(False, "1% POS: not measured")
    else:
        spread = "" if b["pos_mean"] is None else f" ± {b['pos_sd'] or 0:.2f}"
        row(
            c["pos_mean"] >= FLOORS["pos_mean"] - 1e-9,
            f"1% POS: {c['pos_mean']:.2f} ± {c['pos_sd'] or 0:.2f} ({shipped(b['pos_mean'], '.2f')}{spread}; floor {FLOORS['pos_mean']:g})",
        )
    if c["speed_ratio"] is None:
        row(False, "component tokens/s: not measured")
    else:
        row(
            c["speed_ratio"] >= FLOORS["speed_ratio"] - 1e-9,
            f"component tokens/s: {c['speed_ratio']:.3f} of the shipped default's, same run (floor {FLOORS['speed_ratio']:g})",
        )
    if c["model_mb"] is None:
        row(False, "model files: not measured")
    else:
        row(
            c["model_mb"] <= MAX_MODEL_MB,
            f"model files: {c['model_mb']:.1f} MB ({shipped(b['model_mb'], '.1f')} MB; at most {MAX_MODEL_MB:g})",
        )
    if c["books"] is not None:
        passing.append(f"books perplexity (reported, not gated): {c['books']:.1f} ({shipped(b['books'], '.1f')})")
    return not failing, failing, passing


def print_verdict(candidate: Dict[str, Any], baseline: Dict[str, Any]) -> bool:
    ships, failing, passing = ship_rule(candidate, baseline)
    for line in passing:
        print(f"  ok    {line}")
    for line in failing:
        print(f"  FAIL  {line}")
    print("SHIP" if ships else "NOT SHIP: " + "; ".join(failing))
    return ships


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
    ap.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE, help="the shipped default's report, for the ship rule")
    ap.add_argument(
        "--speed-sentences", type=Path, default=None, help="space-tokenised sentences for component_speed (default: UD EWT test text)"
    )
    ap.add_argument("--rule-only", action="store_true", help="apply the ship rule to --output as it stands; measure nothing")
    ap.add_argument("--skip", default="", help="comma-separated measures to leave out: " + ", ".join(MEASURES))
    ap.add_argument("--output", type=Path, required=True)
    args = ap.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    unknown = skip - set(MEASURES)
    if unknown:
        raise SystemExit(f"--skip: unknown measures {sorted(unknown)}; known: {', '.join(MEASURES)}")
    model, t = args.model, args.threads
    baseline: Dict[str, Any] = json.loads(args.baseline.read_text(encoding="utf-8")) if args.baseline.is_file() else {}
    if args.rule_only:
        if not args.output.is_file():
            raise SystemExit(f"--rule-only: {args.output} not found")
        return 0 if print_verdict(json.loads(args.output.read_text(encoding="utf-8")), baseline) else 1
    speed_text = args.speed_sentences or _test_sentences(args.ud)
    jobs: Dict[str, Callable[[], Dict[str, Any]]] = {
        "ud_ewt_test": lambda: perplexity(model, args.ud, t, args.common_with),
        "modern_test": lambda: perplexity(model, args.modern, t, args.common_with),
        "books_test": lambda: perplexity(model, args.books, t, args.common_with),
        "wic": lambda: wic(model, args.data_root / "wic", t),
        "wsd": lambda: wsd(model, args.data_root / "wsd_raganato", t),
        "sense_probe": lambda: sense_probe(model),
        "sense_set": lambda: sense_set(model),
        "pos_1pct": lambda: pos_1pct(model, [0, 1, 2]),
        "component_speed": lambda: component_speed(model, baseline.get("model_path", "en_default"), speed_text),
        "model_files": lambda: model_files(model),
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
    if not baseline:
        print(f"no baseline report at {args.baseline}: the ship rule was not applied")
        return 0
    print_verdict(report, baseline)
    return 0


def _test_sentences(corpus: Path) -> Path:
    """The first test shard of a prepared corpus, as one space-tokenised sentence per line."""
    shards = sorted((corpus / "test").glob("*.txt")) + sorted((corpus / "test").glob("*.txt.gz"))
    if not shards:
        raise SystemExit(f"{corpus}/test has no shards: component_speed needs --speed-sentences or a prepared --ud corpus")
    return shards[0]


if __name__ == "__main__":
    sys.exit(main())
