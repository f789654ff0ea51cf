#!/usr/bin/env python3
"""Ship a leg that passed the ship rule as the embedded default, with its chain and its figures.

    python scripts/ship_leg.py training/default-v2-legN --init INIT --package packages/en_default-legN \\
        --report ../bench/results/candidate-v2cN.json --describe "v2 + legs 3 to N (...)"

The other half of ``keep_leg.py``: a leg of the default (``default-v2-continue``) whose report
passes the ship rule (docs/model-card.md, "The ship rule") replaces ``spacy_elmo/models/en_default``.
Nothing is written until every check has passed:

- the report (``candidate_report.py``'s output) passes :func:`candidate_report.ship_rule` against
  the shipped default's own report (``--baseline``), as the rule is applied today;
- the leg continued ``--init``, which is the shipped default or kept legs that continue its very
  weights (``keep_leg.chain``); a leg kept before it was measured ships from its own kept folder
  (``--init`` that folder: its last kept leg is this one, counted once; where the leg's run folder
  is gone, pass the kept folder as the leg too, and its record is the one kept);
- the report's measures name ``--package`` as the model they read, and that package holds the
  same biLM weights (to the byte) and the same softmax (tensor for tensor) as the leg's model,
  packaged again here: what ships is what was measured;
- with ``--refit DIR`` (``refit-bias``'s output for the leg), the refit's biLM is the leg's very
  weights: its softmax (the refit output bias) ships in place of the leg's, and its ``refit.json``
  beside it (the snapshot records the refit's settings).

Then, in this order: the new default is written beside the shipped one and swapped in when
complete (its ``snapshot.json`` carries the cumulative steps, tokens and CPU-minutes, this leg and
the kept legs it continued; its ``train_config.json`` the precision the leg ran in); the shipped
default's report (``bench/results/shipped-default.json``) becomes this one; every ``default.*``
figure of ``bench/results/figures.json`` is read again from it; the project's next leg continues
the new default (``vars.default_v2_leg``, ``vars.default_v2_continue_init``); the kept-legs folder
the leg continued is removed (its legs are inside the default now). The prose (README, model card,
CHANGELOG) is a person's to write: ``tests/test_figures.py`` checks that its marked figures agree.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import srsly
import torch
from candidate_report import ship_rule
from keep_leg import DEFAULT_OUT, REPO, SHIPPED, _check_init, _seeds, chain, leg_record, read_metrics, sha256, swap_in

from spacy_elmo.training.bias_refit import REFIT_NAME
from spacy_elmo.training.ship import half_softmax, ship_model
from spacy_elmo.training.trainer import SOFTMAX_NAME

BASELINE = REPO / "bench" / "results" / "shipped-default.json"
FIGURES = REPO / "bench" / "results" / "figures.json"
PROJECT = REPO / "project" / "project.yml"
SHIPPED_INIT = "../spacy_elmo/models/en_default"  # vars.default_v2_continue_init when no legs are kept
PRECISION_NAMES = {
    "bfloat16": "bf16",
    "float32": "fp32-fused",
    "float32-fused": "fp32-fused",
}  # what the run logged -> the config's name for it


class ShipRefused(ValueError):
    """The leg cannot ship: the rule, its chain or its package says no (nothing was written)."""


def measured_models(report: Dict[str, Any]) -> List[str]:
    """The folder names the report's measures name as the model they read (``model``/``weights`` fields)."""
    names = {
        Path(value).name
        for section in report.values()
        if isinstance(section, dict)
        for key, value in section.items()
        if key in ("model", "weights") and isinstance(value, str)
    }
    return sorted(names)


def ran_precision(run_dir: Path) -> Optional[str]:
    """The precision the leg's steps ran in (the config's ``auto`` resolved), by the config's names."""
    logged = [r["precision"] for r in read_metrics(run_dir) if "loss" in r and "precision" in r]
    return PRECISION_NAMES.get(logged[-1], logged[-1]) if logged else None


def _the_leg(run_dir: Path, init: Path, kept: List[Dict[str, Any]]) -> Tuple[Dict[str, Any], List[Dict[str, Any]], Optional[str]]:
    """The leg that ships (its record, verdict SHIP), the kept legs before it, and the precision it ran in.

    ``run_dir`` is the leg's finetune folder, or, where that folder is gone (a machine lost), the kept
    folder it was kept in before it was measured (``run_dir`` = ``init``): its record is then the
    last of the folder's kept legs, as ``keep_leg.py`` wrote it from the run folder."""
    if run_dir.resolve() == init.resolve():
        if not kept:
            raise ShipRefused(f"{init} holds no kept legs: pass the leg's own finetune folder")
        return {**kept[-1], "verdict": "SHIP"}, kept[:-1], PRECISION_NAMES.get(kept[-1].get("precision", ""), kept[-1].get("precision"))
    leg = leg_record(run_dir, "SHIP", _check_init(run_dir, init))
    if kept and sha256(init / "weights.pt") == sha256(run_dir / "model" / "weights.pt"):
        # the leg was kept before it was measured: ``init`` is its own kept folder, and its record the chain's last
        if kept[-1]["seed"] != leg["seed"]:
            raise ShipRefused(f"{init} holds {run_dir}'s weights but its last kept leg is seed {kept[-1]['seed']}, not {leg['seed']}")
        kept = kept[:-1]
    return leg, kept, ran_precision(run_dir)


def refit_record(refit: Path, weights_sha: str) -> Dict[str, Any]:
    """``refit``'s ``refit.json`` (a ``refit-bias`` output), checked to hold the leg's very biLM."""
    record_path = Path(refit) / REFIT_NAME
    if not record_path.is_file():
        raise ShipRefused(f"{refit} has no {REFIT_NAME}: pass the folder `refit-bias` wrote for the leg")
    record = json.loads(record_path.read_text(encoding="utf8"))
    if record.get("weights_sha256") != weights_sha or sha256(Path(refit) / "weights.pt") != weights_sha:
        raise ShipRefused(f"{refit} refit another model's bias (its biLM is not the leg's weights): refit the leg itself")
    return record


def same_softmax(a: Path, b: Path) -> bool:
    """Whether two softmax files hold the same tensors (as ship stores them: float16)."""
    left, right = (torch.load(path, map_location="cpu", weights_only=True) for path in (a, b))
    return left.keys() == right.keys() and all(torch.equal(left[k].half(), right[k].half()) for k in left)


def refit_summary(record: Dict[str, Any]) -> Dict[str, Any]:
    """What the snapshot keeps of a refit: its corpus folder's name, contexts, settings, each step's
    distance and, where the output vectors were fitted too, each validation read."""
    return {
        "data": Path(record["data"]).name,
        "contexts": record["contexts"],
        "settings": record["settings"],
        "history": record["history"],
        **({"rows": record["rows"]} if "rows" in record else {}),
    }


def leg_description(leg: Dict[str, Any], config: Dict[str, Any], kept: List[Dict[str, Any]], base_model: str) -> str:
    """One line for the snapshot: this leg's settings and what it continued."""
    text = (
        f"default-v2-continue (seed {leg['seed']}, {leg['steps']:,} steps, {leg['precision']}, "
        f"peak lr {_lr(config['lr'])}, dropout {config.get('dropout', 0.0):g})"
    )
    if leg.get("widened"):
        widened = leg["widened"]
        text += f", its LSTM widened from {widened['from']} to {widened['to']} cells first (`widen --method {widened['method']}`, seed {widened['seed']})"
    if kept:
        text += (
            f"; from the kept legs {', '.join(_seeds(x) for x in kept)} (each missed the ship rule's margin and was kept in the repository)"
        )
    return text + f", from en_default ({base_model})"


def refit_words(record: Dict[str, Any]) -> str:
    """The refit as the model's description says it."""
    words = f"output bias refit on {record['settings']['sentences']:,} training sentences"
    if "rows" in record:
        words += f", output vectors on {record['settings']['row_sentences']:,}"
    return words


def default_describe(
    shipped_model: str, kept: List[Dict[str, Any]], leg: Dict[str, Any], config: Dict[str, Any], refit: Optional[Dict[str, Any]] = None
) -> str:
    """What the new default is, from what the shipped one was (``"v2 + legs 3 to 24 (...)"``) and the legs added."""
    prefix = shipped_model.split(" (", 1)[0]
    seeds = [x["seed"] for x in kept] + [leg["seed"]]
    grown = re.sub(r"(legs \d+ to )\d+$", rf"\g<1>{leg['seed']}", prefix)
    if grown == prefix:
        grown = f"{prefix} + {'legs' if len(seeds) > 1 else 'leg'} {', '.join(str(x) for x in seeds)}"
    kept_part = f"legs {seeds[0]} to {seeds[-2]} kept, " if len(seeds) > 2 else (f"leg {seeds[0]} kept, " if kept else "")
    return (
        f"{grown} (default-v2-continue; {kept_part}leg {leg['seed']}: {leg['steps']:,} steps, {leg['precision']}, "
        f"peak lr {_lr(config['lr'])}, dropout {config.get('dropout', 0.0):g}"
        f"{'; LSTM widened to ' + str(leg['widened']['to']) + ' cells before it' if leg.get('widened') else ''}"
        f"{'; ' + refit_words(refit) if refit else ''})"
    )


def _lr(value: float) -> str:
    """A learning rate as the card writes it (1e-4, 3e-3)."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}" if float(mantissa) * 10 ** int(exponent) == value else f"{value:g}"


def figure_value(report: Dict[str, Any], source: str) -> Optional[float]:
    """The number at ``source``'s JSON pointer (``file.json#/a/b/0``) in ``report``; None where absent."""
    if "#" not in source:
        return None
    node: Any = report
    for part in source.split("#", 1)[1].strip("/").split("/"):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return float(node) if isinstance(node, (int, float)) else None


def chosen_in(what: str, chosen: str) -> str:
    """A figure's description with the layer or mix the dev set chose replaced by ``chosen``."""
    named = "the " + chosen if chosen.startswith("average") else chosen
    return re.sub(r"(chosen on (?:dev|semeval2007)(?:: | \())([^)]*)(\)?)$", lambda m: m.group(1) + named + m.group(3), what)


def updated_figures(figures: Dict[str, Any], report: Dict[str, Any], results_name: str, describe: str) -> Dict[str, Any]:
    """``figures`` with every ``default.*`` entry read again from the new default's ``report``
    (published as ``bench/results/{results_name}.json``); a figure the report lacks is an error."""
    out = json.loads(json.dumps(figures))
    for key, entry in out.items():
        if not key.startswith("default."):
            continue
        entry["source"] = re.sub(r"[^/#]+\.json(?=#)", f"{results_name}.json", entry["source"])
        value = figure_value(report, entry["source"])
        if value is None:
            raise ShipRefused(f"figure {key}: the report has no number at {entry['source'].split('#', 1)[1]}")
        entry["value"] = round(value * entry.get("scale", 1), 4)
        entry["model"] = f"the shipped default (en_default: {describe})"
    chosen = {"default.wic.test": ("wic", "chosen_on_dev"), "default.wsd.all.prior": ("wsd", "with_prior_chosen_on_dev")}
    for key, (section, field) in chosen.items():
        if key in out and isinstance(report.get(section, {}).get(field), str):
            out[key]["what"] = chosen_in(out[key]["what"], report[section][field])
    return out


def next_leg_project(text: str, next_leg: int) -> str:
    """project.yml's text with the next leg numbered ``next_leg`` and continuing the shipped default."""
    text, n_init = re.subn(r'(default_v2_continue_init: )"[^"]*"', rf'\1"{SHIPPED_INIT}"', text, count=1)
    text, n_leg = re.subn(r"(default_v2_leg: )\d+", rf"\g<1>{next_leg}", text, count=1)
    if not (n_init and n_leg):
        raise ShipRefused("project.yml has no vars.default_v2_continue_init or vars.default_v2_leg to move on")
    return text


def ship_leg(
    run_dir: Path,
    init: Path,
    package: Path,
    report_path: Path,
    describe: Optional[str] = None,
    *,
    refit: Optional[Path] = None,
    shipped: Path = SHIPPED,
    baseline_path: Path = BASELINE,
    figures_path: Path = FIGURES,
    project_path: Path = PROJECT,
    kept_folder: Path = DEFAULT_OUT,
) -> Dict[str, Any]:
    """Replace ``shipped`` with ``run_dir``'s model after the checks above; the new snapshot."""
    run_dir, init, package, shipped = Path(run_dir), Path(init), Path(package), Path(shipped)
    report = json.loads(Path(report_path).read_text(encoding="utf8"))
    baseline = json.loads(Path(baseline_path).read_text(encoding="utf8"))
    ships, failing, _ = ship_rule(report, baseline)
    if not ships:
        raise ShipRefused(f"{report_path} does not pass the ship rule against {baseline_path}: " + "; ".join(failing))
    named = measured_models(report)
    if named != [package.name]:
        raise ShipRefused(
            f"{report_path} measured {', '.join(named) or 'no named model'}, not {package.name}: pass the package the report measured"
        )
    kept, base_sha = chain(init, shipped)
    leg, kept, precision = _the_leg(run_dir, init, kept)
    config = json.loads((run_dir / "train_config.json").read_text(encoding="utf8"))
    base = json.loads((shipped / "snapshot.json").read_text(encoding="utf8"))
    refit_info = refit_record(Path(refit), sha256(package / "weights.pt")) if refit is not None else None
    describe = describe or default_describe(baseline.get("model", "the shipped default"), kept, leg, config, refit_info)
    figures = updated_figures(json.loads(Path(figures_path).read_text(encoding="utf8")), report, Path(report_path).stem, describe)
    project = next_leg_project(Path(project_path).read_text(encoding="utf8"), int(leg["seed"]) + 1)
    staging = shipped.with_name(shipped.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    ship_model(run_dir, staging)
    try:
        if sha256(staging / "weights.pt") != sha256(package / "weights.pt"):
            raise ShipRefused(f"{package} (the model the report measured) does not hold {run_dir}'s weights: measure the leg's own package")
        if refit_info is not None and refit is not None:  # the one implies the other (refit_info is read from refit)
            half_softmax(Path(refit) / SOFTMAX_NAME, staging / SOFTMAX_NAME)
            srsly.write_json(
                staging / REFIT_NAME,
                {**refit_info, "input": {"weights_sha256": refit_info["input"]["weights_sha256"]}, "data": Path(refit_info["data"]).name},
            )
        if not same_softmax(staging / SOFTMAX_NAME, package / SOFTMAX_NAME):
            what = f"{refit}'s refit softmax" if refit is not None else f"{run_dir}'s softmax (refit? pass --refit)"
            raise ShipRefused(f"{package} (the model the report measured) does not hold {what}: measure the package of what ships")
        train_config = srsly.read_json(staging / "train_config.json")
        train_config["precision"] = precision or train_config.get("precision")
        train_config["out_dir"] = f"training/{Path(config.get('out_dir') or run_dir.name).name}"
        if kept:
            seeds = [x["seed"] for x in kept]
            train_config["init_model"] = f"en_default + legs {seeds[0]} to {seeds[-1]} (kept in project/models/{kept_folder.name})"
        else:
            train_config["init_model"] = "en_default"
        srsly.write_json(staging / "train_config.json", train_config)
        legs = kept + [leg]
        snapshot = {
            "step": base["step"] + sum(x["steps"] for x in legs),
            "tokens": base["tokens"] + sum(x["tokens"] for x in legs),
            "elapsed_minutes": round(base["elapsed_minutes"] + sum(x["elapsed_minutes"] for x in legs), 2),
            "run": f"{base['run']}, then legs {', '.join(_seeds(x) for x in legs)}",
            "leg": {
                "run": leg_description(leg, config, kept, baseline.get("model", "the shipped default")),
                "step": leg["steps"],
                "tokens": leg["tokens"],
                "elapsed_minutes": leg["elapsed_minutes"],
            },
            "previous_sha256": base_sha,
            "kept_legs": kept,
        }
        if refit_info is not None:
            snapshot["output_bias_refit"] = refit_summary(refit_info)
        (staging / "snapshot.json").write_text(json.dumps(snapshot, indent=1) + "\n", encoding="utf8")
    except BaseException:
        shutil.rmtree(staging)
        raise
    new_report = {k: v for k, v in report.items() if k != "note"}
    new_report.update(
        {
            "model": describe,
            "command": baseline.get("command"),
            "machine": baseline.get("machine"),
            "snapshot": snapshot,
            "model_path": "en_default",
        }
    )
    swap_in(staging, shipped)
    Path(baseline_path).write_text(json.dumps(new_report, indent=1) + "\n", encoding="utf8")
    Path(figures_path).write_text(json.dumps(figures, indent=1, ensure_ascii=False) + "\n", encoding="utf8")
    Path(project_path).write_text(project, encoding="utf8")
    if kept and init.resolve() == Path(kept_folder).resolve() and init.exists():
        shutil.rmtree(init)
    return snapshot


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "run_dir",
        type=Path,
        help="the finished leg's finetune output folder (or, where it is gone, the kept folder it was kept in: --init)",
    )
    parser.add_argument("--init", type=Path, required=True, help="the folder the leg continued (the shipped default or kept legs)")
    parser.add_argument("--package", type=Path, required=True, help="the leg's package that candidate_report.py measured")
    parser.add_argument("--report", type=Path, required=True, help="candidate_report.py's output for that package")
    parser.add_argument(
        "--describe",
        default=None,
        help='what the new default is, for its report and figures (default: "v2 + legs 3 to N (...)" from the legs)',
    )
    parser.add_argument(
        "--refit", type=Path, default=None, help="the leg's `refit-bias` output: its refit softmax ships (the package must hold it)"
    )
    parser.add_argument("--shipped", type=Path, default=SHIPPED, help="the shipped default's folder (default: the package's)")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help="the shipped default's report (replaced)")
    parser.add_argument("--figures", type=Path, default=FIGURES, help="the docs' figures (default.* entries updated)")
    parser.add_argument("--project", type=Path, default=PROJECT, help="project.yml (its next leg moved on)")
    parser.add_argument("--kept", type=Path, default=DEFAULT_OUT, help="the kept-legs folder (removed when the leg continued it)")
    args = parser.parse_args(argv)
    try:
        snapshot = ship_leg(
            args.run_dir,
            args.init,
            args.package,
            args.report,
            args.describe,
            refit=args.refit,
            shipped=args.shipped,
            baseline_path=args.baseline,
            figures_path=args.figures,
            project_path=args.project,
            kept_folder=args.kept,
        )
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"shipped {args.run_dir} as {args.shipped}: {snapshot['tokens']:,} tokens, {snapshot['elapsed_minutes'] / 60:.1f} CPU-hours cumulative"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
