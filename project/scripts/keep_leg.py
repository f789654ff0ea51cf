#!/usr/bin/env python3
"""Keep a leg that missed the ship rule's margin in the repository, so that no machine holds it.

    python scripts/keep_leg.py training/default-v2-legN --init INIT [--out models/en_default-next] [--verdict "..."]
        [--sibling training/default-v2-legNb --valid-json VALID.json]
    python scripts/keep_leg.py models/en_default-next --measured --verdict "..."

A leg of the default (``default-v2-continue``) that holds the floors but misses the margin is
continued by the next leg, and the legs are measured together against the shipped default
(docs/model-card.md, "Keep it learning"). Its package used to live in ``packages/``, a folder
outside git, and two legs were lost with a machine that way. This writes the leg's package (the
embedded default's layout, as ``ship`` writes it) into ``--out``, a folder the repository tracks,
with a ``snapshot.json`` that carries the whole chain:

- ``base_sha256``: the SHA-256 of the shipped default's ``weights.pt`` the legs continue, so a
  kept folder that no longer continues the shipped default (another default shipped since) is
  seen at once (``tests/test_kept_legs.py``);
- ``kept_legs``: each kept leg (seed, steps, tokens, minutes, precision, validation perplexity at
  its end, the rule's verdict) in order;
- ``step``, ``tokens``, ``elapsed_minutes``: the shipped default's cumulative figures plus the kept
  legs', as the card records them.

A leg may be run twice from the same init with two seeds, one on each core (sibling runs): with
``--sibling`` the kept model is the mean of their weights (``spacy_elmo average``, a uniform model
soup), the leg's steps, tokens and minutes are the runs' sums and ``averaged`` lists each run.

The new folder is written beside ``--out`` and swapped in only when complete, so an interrupted
run leaves the previous kept legs as they were. When the legs ship, ``--out`` is removed in the
commit that replaces the default.

A leg kept at the end of a working stretch before it could be measured (``--verdict "not yet
measured ..."``) gets its verdict later with ``--measured`` (the kept folder as RUN_DIR): only that
leg's verdict changes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from spacy_elmo.bilm.weights import file_sha256 as sha256
from spacy_elmo.training.average import average_models
from spacy_elmo.training.ship import ship_model
from spacy_elmo.training.widen import WIDEN_NAME

REPO = Path(__file__).resolve().parent.parent.parent
SHIPPED = REPO / "spacy_elmo" / "models" / "en_default"
DEFAULT_OUT = REPO / "project" / "models" / "en_default-next"
UNMEASURED = "not yet measured"  # the verdict of a leg kept before the ship rule measured it


def read_metrics(run_dir: Path) -> List[Dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: pass the output folder of a finished `finetune` leg")
    return [json.loads(line) for line in path.read_text(encoding="utf8").splitlines() if line.strip()]


def leg_record(run_dir: Path, verdict: Optional[str], widened: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The finished leg's own figures: from its train_config.json and metrics.jsonl (``widened``: the
    widening of its start, :func:`_check_init`'s record, kept with the leg)."""
    config = json.loads((run_dir / "train_config.json").read_text(encoding="utf8"))
    rows = read_metrics(run_dir)
    train = [r for r in rows if "loss" in r]
    valid = [r for r in rows if "valid_ppl_avg" in r]
    if not (run_dir / "model" / "weights.pt").is_file() or not train:
        last = train[-1]["step"] if train else 0
        raise ValueError(f"{run_dir} has no model/ (logged up to step {last} of {config['max_steps']}): only a finished leg is kept")
    precisions = sorted({r["precision"] for r in train if "precision" in r})
    return {
        "seed": config["seed"],
        "steps": config["max_steps"],
        "tokens": int(train[-1]["tokens"]),
        "elapsed_minutes": round(train[-1]["elapsed_s"] / 60.0, 2),
        "precision": "/".join(precisions) or config.get("precision"),
        "lr": config["lr"],
        "valid_ppl_end": round(valid[-1]["valid_ppl_avg"], 2) if valid else None,
        "verdict": verdict or UNMEASURED,
        **({"widened": widened} if widened else {}),
    }


def chain(init: Path, shipped: Path) -> Tuple[List[Dict[str, Any]], str]:
    """What ``init`` holds (the shipped default itself, or kept legs on top of it): its kept legs and
    the shipped weights' SHA-256."""
    shipped_sha = json.loads((shipped / "config.json").read_text(encoding="utf8"))["sha256"]["weights.pt"]
    init_sha = sha256(init / "weights.pt")
    if init_sha == shipped_sha:
        return [], shipped_sha
    snapshot = json.loads((init / "snapshot.json").read_text(encoding="utf8")) if (init / "snapshot.json").is_file() else {}
    if snapshot.get("base_sha256") != shipped_sha or init_sha != snapshot.get("weights_sha256"):
        raise ValueError(
            f"{init} is neither the shipped default nor kept legs that continue it (its snapshot.json's base_sha256 "
            f"is {snapshot.get('base_sha256')!r}, the shipped weights' {shipped_sha!r}): keep legs that continue the shipped default"
        )
    return list(snapshot.get("kept_legs", [])), shipped_sha


def _seeds(leg: Dict[str, Any]) -> str:
    """A leg's seed, or its runs' seeds where it is the mean of sibling runs (and its widening, if any)."""
    seeds = " + ".join(str(x["seed"]) for x in leg["averaged"]) + " (mean)" if leg.get("averaged") else str(leg["seed"])
    widened = leg.get("widened")
    return f"{seeds} (cells {widened['from']} -> {widened['to']})" if widened else seeds


def readme(snapshot: Dict[str, Any]) -> str:
    """What the kept folder is, for a person who finds it in the repository."""
    rows = "\n".join(
        f"| {_seeds(x)} | {x['steps']:,} | {x['tokens']:,} | {x['elapsed_minutes']:.0f} | {x['precision']} | {x['lr']:g} | {x['valid_ppl_end']} | {x['verdict']} |"
        for x in snapshot["kept_legs"]
    )
    return (
        "# Kept legs of the default: the next leg's start (not shipped)\n\n"
        "Legs of the embedded default that missed the ship rule's margin, kept in the repository so that no\n"
        'machine holds the only copy (`project/scripts/keep_leg.py`, docs/model-card.md, "Keep it learning").\n'
        "The next leg continues this folder (`vars.default_v2_continue_init`); when the legs ship, the folder\n"
        "goes in the commit that replaces `spacy_elmo/models/en_default`. Not part of the wheel.\n\n"
        f"Continues the shipped weights with SHA-256 `{snapshot['base_sha256']}`; cumulative {snapshot['tokens']:,} tokens.\n\n"
        "| seed | steps | tokens | CPU-minutes | precision | peak lr | valid ppl at its end | verdict |\n"
        "| ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n"
        f"{rows}\n"
    )


def _check_init(run_dir: Path, init: Path) -> Optional[Dict[str, Any]]:
    """Check that ``run_dir``'s leg continued ``init``: directly, or from ``init`` widened by
    ``spacy_elmo widen`` (the widened folder's ``widen.json`` names ``init``'s weights and its own,
    both checked); returns the widening's record (``None`` for a leg of the same shape)."""
    ran_from = json.loads((run_dir / "train_config.json").read_text(encoding="utf8")).get("init_model")
    if not ran_from or Path(ran_from).resolve() == init.resolve():
        return None
    widened = Path(ran_from) / WIDEN_NAME
    if widened.is_file():
        record = json.loads(widened.read_text(encoding="utf8"))
        if record.get("source_weights_sha256") != sha256(init / "weights.pt"):
            raise ValueError(
                f"{run_dir} continued {ran_from}, a widening of other weights than {init}'s: pass the folder that was widened as --init"
            )
        if record.get("weights_sha256") != sha256(Path(ran_from) / "weights.pt"):
            raise ValueError(f"{ran_from}'s weights are not the ones its {WIDEN_NAME} records: the widened start was changed")
        return {
            "from": record["cell_dim"]["from"],
            "to": record["cell_dim"]["to"],
            "method": record.get("method", "zero"),
            "seed": record["seed"],
        }
    raise ValueError(f"{run_dir} continued {ran_from}, not {init}: pass the folder the leg started from as --init")


def soup_record(leg: Dict[str, Any], siblings: Sequence[Dict[str, Any]], valid_ppl: Optional[float]) -> Dict[str, Any]:
    """One leg made of sibling runs averaged: its steps, tokens and minutes are the runs' sums (the
    CPU work it holds), ``runs`` each run's own record, ``valid_ppl_end`` the mean model's as measured."""
    runs = [leg] + list(siblings)
    return {
        **leg,
        "steps": sum(x["steps"] for x in runs),
        "tokens": sum(x["tokens"] for x in runs),
        "elapsed_minutes": round(sum(x["elapsed_minutes"] for x in runs), 2),
        "valid_ppl_end": valid_ppl,
        "averaged": [{k: v for k, v in x.items() if k != "verdict"} for x in runs],
    }


def valid_perplexity(path: Optional[Path]) -> Optional[float]:
    """The average validation perplexity in ``evaluate``'s output JSON (None without one)."""
    if path is None:
        return None
    result = json.loads(Path(path).read_text(encoding="utf8"))
    if result.get("split") != "valid" or "ppl_avg" not in result:
        raise ValueError(f"{path} is not `evaluate --split valid --output` of a model (split {result.get('split')!r})")
    return round(float(result["ppl_avg"]), 2)


def keep_leg(
    run_dir: Path,
    init: Path,
    out: Path,
    shipped: Path = SHIPPED,
    verdict: Optional[str] = None,
    siblings: Sequence[Path] = (),
    valid_ppl: Optional[float] = None,
) -> Dict[str, Any]:
    """Write ``run_dir``'s package with its chain into ``out`` (swapped in when complete); its snapshot.
    With ``siblings`` (runs of the same leg from the same init, other seeds) the kept model is the
    mean of their weights and ``run_dir``'s (``spacy_elmo average``), ``valid_ppl`` its measured
    validation perplexity."""
    run_dir, init, out = Path(run_dir), Path(init), Path(out)
    siblings = [Path(p) for p in siblings]
    init_sha = sha256(init / "weights.pt")
    for run in [run_dir, *siblings]:
        if (run / "model" / "weights.pt").is_file() and sha256(run / "model" / "weights.pt") == init_sha:
            raise ValueError(f"{run}'s weights are already {init}'s: this leg was kept there (a leg is kept once)")
    widenings = [_check_init(run, init) for run in [run_dir, *siblings]]
    if any(w != widenings[0] for w in widenings):
        raise ValueError("sibling runs must start from the same model (one shape, one widening)")
    kept, base_sha = chain(init, shipped)
    leg = leg_record(run_dir, verdict, widenings[0])
    if siblings:
        leg = soup_record(leg, [leg_record(p, None) for p in siblings], valid_ppl)
    legs = kept + [leg]
    base = json.loads((shipped / "snapshot.json").read_text(encoding="utf8"))  # the cumulative figures the legs add to
    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    if siblings:
        soup = out.with_name(out.name + ".soup")
        average_models([run_dir, *siblings], soup)
        shutil.copyfile(run_dir / "train_config.json", soup / "train_config.json")
        ship_model(soup, staging)
        shutil.rmtree(soup)
    else:
        ship_model(run_dir, staging)
    snapshot = {
        "step": base["step"] + sum(x["steps"] for x in legs),
        "tokens": base["tokens"] + sum(x["tokens"] for x in legs),
        "elapsed_minutes": round(base["elapsed_minutes"] + sum(x["elapsed_minutes"] for x in legs), 2),
        "run": f"{base['run']}, then kept legs " + ", ".join(f"seed {x['seed']}" for x in legs) + " (not shipped yet)",
        "leg": {
            "run": f"default-v2-continue (seed {leg['seed']}, {leg['steps']:,} steps, {leg['precision']})"
            + (f", the mean of seeds {', '.join(str(x['seed']) for x in leg['averaged'])}" if siblings else ""),
            "step": leg["steps"],
            "tokens": leg["tokens"],
            "elapsed_minutes": leg["elapsed_minutes"],
        },
        "base_sha256": base_sha,
        "weights_sha256": sha256(staging / "weights.pt"),
        "kept_legs": legs,
    }
    finish(staging, snapshot, out)
    return snapshot


def record_verdict(out: Path, verdict: str) -> Dict[str, Any]:
    """Record the ship rule's ``verdict`` on the last leg kept in ``out`` before it was measured (kept
    at the end of a working stretch with a verdict starting "not yet measured"); its snapshot, rewritten
    beside it and swapped in. A measured leg's verdict is not overwritten."""
    out = Path(out)
    snapshot = json.loads((out / "snapshot.json").read_text(encoding="utf8"))
    legs = snapshot.get("kept_legs") or []
    if not legs:
        raise ValueError(f"{out} holds no kept legs: nothing to record a verdict on")
    if not str(legs[-1].get("verdict", "")).startswith(UNMEASURED):
        raise ValueError(f"{out}'s last kept leg (seed {legs[-1]['seed']}) already has its verdict: {legs[-1]['verdict']!r}")
    if not verdict.strip() or verdict.startswith(UNMEASURED):
        raise ValueError("pass the measured verdict (the rule's SHIP or NOT SHIP and its figures)")
    legs[-1] = {**legs[-1], "verdict": verdict}
    snapshot["kept_legs"] = legs
    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(out, staging)
    finish(staging, snapshot, out)
    return snapshot


def finish(staging: Path, snapshot: Dict[str, Any], out: Path) -> None:
    """Write ``snapshot`` and its README into the complete folder ``staging`` and swap it in for ``out``."""
    (staging / "snapshot.json").write_text(json.dumps(snapshot, indent=1) + "\n", encoding="utf8")
    (staging / "README.md").write_text(readme(snapshot), encoding="utf8")
    swap_in(staging, out)


def swap_in(staging: Path, dest: Path) -> None:
    """Put the complete folder ``staging`` in ``dest``'s place (the previous ``dest``, if any, removed
    only once the new one is in place)."""
    retired = dest.with_name(dest.name + ".old")
    if retired.exists():
        shutil.rmtree(retired)
    if dest.exists():
        dest.rename(retired)
    staging.rename(dest)
    if retired.exists():
        shutil.rmtree(retired)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path, help="the finished leg's finetune output folder")
    parser.add_argument("--init", type=Path, default=None, help="the folder the leg continued (the shipped default or kept legs)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--shipped", type=Path, default=SHIPPED, help="the shipped default (default: the package's)")
    parser.add_argument("--verdict", default=None, help="the ship rule's verdict on the legs, when measured")
    parser.add_argument(
        "--sibling",
        type=Path,
        action="append",
        default=[],
        help="another finished run of this leg (same init, its own seed): keep the mean of their weights",
    )
    parser.add_argument(
        "--valid-json",
        type=Path,
        default=None,
        help="with --sibling: `evaluate --split valid --output` of the mean model (its perplexity is recorded)",
    )
    parser.add_argument(
        "--measured",
        action="store_true",
        help="RUN_DIR is a kept folder: record --verdict on its last leg, kept before it was measured (nothing else changes)",
    )
    args = parser.parse_args(argv)
    if args.measured:
        try:
            snapshot = record_verdict(args.run_dir, args.verdict or "")
        except (FileNotFoundError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"recorded the verdict on seed {snapshot['kept_legs'][-1]['seed']} in {args.run_dir}")
        return 0
    if args.init is None:
        parser.error("--init is required: the folder the leg continued")
    try:
        snapshot = keep_leg(args.run_dir, args.init, args.out, args.shipped, args.verdict, args.sibling, valid_perplexity(args.valid_json))
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    legs = snapshot["kept_legs"]
    print(
        f"kept {len(legs)} leg(s) in {args.out}: seeds {', '.join(str(x['seed']) for x in legs)}; cumulative {snapshot['tokens']:,} tokens"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
