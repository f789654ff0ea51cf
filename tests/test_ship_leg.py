"""Shipping a leg of the default (``project/scripts/ship_leg.py``): only what passed the rule, only
the model that was measured, and every record of the shipped default moved on together."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest
import torch
import yaml
from keep_leg import keep_leg
from ship_leg import ShipRefused, default_describe, main, ship_leg

from tests.test_kept_legs import _leg, _model, _shipped

REPO = Path(__file__).resolve().parent.parent
CONTEXT = "context words, with the LM head's output embeddings (the context representation)"


def _records(tmp_path: Path, ari_gain: float) -> Tuple[Path, Path, Path, Path]:
    """The shipped default's report, the docs' figures and project.yml, copied; a candidate report
    that is the shipped one with its context-vector ARI moved by ``ari_gain``."""
    baseline = tmp_path / "shipped-default.json"
    shutil.copyfile(REPO / "bench" / "results" / "shipped-default.json", baseline)
    figures = tmp_path / "figures.json"
    shutil.copyfile(REPO / "bench" / "results" / "figures.json", figures)
    project = tmp_path / "project.yml"
    shutil.copyfile(REPO / "project" / "project.yml", project)
    report: Dict[str, Any] = json.loads(baseline.read_text())
    report["sense_set"]["features"][CONTEXT]["ari_gold"] += ari_gain
    report["note"] = "measured by hand"
    for section in report.values():  # measured on the leg's package
        for key in ("model", "weights"):
            if isinstance(section, dict) and isinstance(section.get(key), str):
                section[key] = "packages/package"
    candidate = tmp_path / "candidate-v2c17.json"
    candidate.write_text(json.dumps(report))
    return candidate, baseline, figures, project


def _state(*paths: Path) -> Dict[str, bytes]:
    out = {}
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        out.update({str(p): p.read_bytes() for p in files})
    return out


def test_a_leg_that_passes_the_rule_ships_with_its_chain_its_report_and_its_figures(tmp_path):
    shipped = _shipped(tmp_path)
    kept = tmp_path / "next"
    keep_leg(_leg(tmp_path, shipped, 16, b"leg 16"), shipped, kept, shipped=shipped, verdict="NOT SHIP")
    run = _leg(tmp_path, kept, 17, b"leg 17")
    package = tmp_path / "package"
    _model(package, b"leg 17")
    candidate, baseline, figures, project = _records(tmp_path, 0.05)
    old_ari = json.loads(baseline.read_text())["sense_set"]["features"][CONTEXT]["ari_gold"]
    snapshot = ship_leg(
        run, kept, package, candidate, "v2 + legs 3 to 17", shipped=shipped, baseline_path=baseline,
        figures_path=figures, project_path=project, kept_folder=kept,
    )  # fmt: skip
    assert (shipped / "weights.pt").read_bytes() == b"leg 17" and not kept.exists()
    assert snapshot["tokens"] == 5_000_000 + 2 * 160_000 and snapshot["step"] == 1080 and snapshot["elapsed_minutes"] == 104.0
    assert [x["seed"] for x in snapshot["kept_legs"]] == [16] and snapshot["previous_sha256"] == hashlib.sha256(
        b"shipped weights"
    ).hexdigest()
    assert "seed 17" in snapshot["leg"]["run"] and "kept legs 16" in snapshot["leg"]["run"] and snapshot["run"].endswith("then legs 16, 17")
    assert json.loads((shipped / "snapshot.json").read_text()) == snapshot
    config = json.loads((shipped / "train_config.json").read_text())
    assert config["precision"] == "bf16" and config["init_model"] == "en_default + legs 16 to 16 (kept in project/models/next)"
    report = json.loads(baseline.read_text())
    assert report["model"] == "v2 + legs 3 to 17" and report["model_path"] == "en_default" and "note" not in report
    assert report["sense_set"]["features"][CONTEXT]["ari_gold"] == pytest.approx(old_ari + 0.05)
    figure = json.loads(figures.read_text())["default.sense_set.context_ari"]
    assert (
        figure["value"] == round(old_ari + 0.05, 4)
        and "candidate-v2c17.json#" in figure["source"]
        and "v2 + legs 3 to 17" in figure["model"]
    )
    variables = yaml.safe_load(project.read_text())["vars"]
    assert variables["default_v2_leg"] == 18 and variables["default_v2_continue_init"] == "../spacy_elmo/models/en_default"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("shipped")) == ["shipped", "shipped-default.json"]


def _kept_before_measured(tmp_path: Path) -> Tuple[Path, Path, Path, Path, Path, Dict[str, Any]]:
    """Leg 16 kept (NOT SHIP), leg 17 kept after it before it was measured; its package and a
    passing report: (shipped, kept folder, leg 17's run folder, package, report, ship_leg's places)."""
    shipped = _shipped(tmp_path)
    kept = tmp_path / "next"
    keep_leg(_leg(tmp_path, shipped, 16, b"leg 16"), shipped, kept, shipped=shipped, verdict="NOT SHIP")
    run = _leg(tmp_path, kept, 17, b"leg 17")
    keep_leg(run, kept, kept, shipped=shipped, verdict="not yet measured")  # kept at the end of a stretch
    package = tmp_path / "package"
    _model(package, b"leg 17")
    candidate, baseline, figures, project = _records(tmp_path, 0.05)
    places = dict(shipped=shipped, baseline_path=baseline, figures_path=figures, project_path=project, kept_folder=kept)
    return shipped, kept, run, package, candidate, places


def test_a_leg_kept_before_it_was_measured_ships_from_its_kept_folder_counted_once(tmp_path):
    shipped, kept, run, package, candidate, places = _kept_before_measured(tmp_path)
    snapshot = ship_leg(run, kept, package, candidate, "v2 + legs 3 to 17", **places)
    assert [x["seed"] for x in snapshot["kept_legs"]] == [16] and snapshot["tokens"] == 5_000_000 + 2 * 160_000
    assert (shipped / "weights.pt").read_bytes() == b"leg 17" and not kept.exists()


def test_a_kept_leg_whose_run_folder_is_gone_ships_from_its_kept_record(tmp_path):
    shipped, kept, run, package, candidate, places = _kept_before_measured(tmp_path)
    config = json.loads((kept / "train_config.json").read_text())
    (kept / "train_config.json").write_text(json.dumps({**config, "out_dir": "training/default-v2-leg17"}))  # as finetune records it
    shutil.rmtree(run)  # the machine that ran it is gone; the kept folder is in the repository
    snapshot = ship_leg(kept, kept, package, candidate, "v2 + legs 3 to 17", **places)
    assert [x["seed"] for x in snapshot["kept_legs"]] == [16] and snapshot["tokens"] == 5_000_000 + 2 * 160_000
    assert snapshot["step"] == 1080 and snapshot["elapsed_minutes"] == 104.0 and "seed 17" in snapshot["leg"]["run"]
    config = json.loads((shipped / "train_config.json").read_text())
    assert config["precision"] == "bf16" and config["out_dir"] == "training/default-v2-leg17"
    assert (shipped / "weights.pt").read_bytes() == b"leg 17" and not kept.exists()


def test_a_kept_folder_without_kept_legs_is_not_a_leg(tmp_path):
    shipped = _shipped(tmp_path)
    package = tmp_path / "package"
    _model(package, b"shipped weights")
    candidate, baseline, figures, project = _records(tmp_path, 0.05)
    before = _state(shipped, baseline, figures, project)
    places = dict(shipped=shipped, baseline_path=baseline, figures_path=figures, project_path=project, kept_folder=tmp_path / "next")
    with pytest.raises(ShipRefused, match="holds no kept legs"):
        ship_leg(shipped, shipped, package, candidate, "v2", **places)
    assert _state(shipped, baseline, figures, project) == before


def test_what_did_not_pass_or_was_not_measured_is_refused_and_nothing_is_written(tmp_path):
    shipped = _shipped(tmp_path)
    run = _leg(tmp_path, shipped, 16, b"leg 16")
    package = tmp_path / "package"
    _model(package, b"leg 16")
    candidate, baseline, figures, project = _records(tmp_path, 0.01)  # under the margin: modern the same, ARI +0.01
    before = _state(shipped, baseline, figures, project)
    places = dict(shipped=shipped, baseline_path=baseline, figures_path=figures, project_path=project, kept_folder=tmp_path / "next")
    with pytest.raises(ShipRefused, match="does not pass the ship rule.*better by the margin"):
        ship_leg(run, shipped, package, candidate, "v2 + legs 3 to 16", **places)
    (tmp_path / "passing").mkdir()
    candidate, *_ = _records(tmp_path / "passing", 0.05)  # passes the rule, but names another model or init
    with pytest.raises(ShipRefused, match="measured package, not other-package"):
        ship_leg(run, shipped, tmp_path / "other-package", candidate, "v2 + legs 3 to 16", **places)
    other = tmp_path / "other" / "package"
    _model(other, b"another model")
    with pytest.raises(ShipRefused, match="does not hold .*weights"):
        ship_leg(run, shipped, other, candidate, "v2 + legs 3 to 16", **places)
    with pytest.raises(ValueError, match="pass the folder the leg started from"):
        ship_leg(_leg(tmp_path / "x", tmp_path / "elsewhere", 17, b"leg 17"), shipped, package, candidate, "v2", **places)
    assert _state(shipped, baseline, figures, project) == before
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())
    args = [str(run), "--init", str(shipped), "--package", str(other), "--report", str(candidate), "--describe", "v2"]
    assert main(args + ["--shipped", str(shipped), "--baseline", str(baseline), "--figures", str(figures), "--project", str(project)]) == 2
    assert _state(shipped, baseline, figures, project) == before


def test_the_new_default_is_described_from_the_shipped_one_and_the_legs_added():
    leg, config = {"seed": 26, "steps": 4000, "precision": "bfloat16"}, {"lr": 1e-4, "dropout": 0.1}
    shipped = "v2 + legs 3 to 24 (default-v2-continue; legs 19 to 23 kept, leg 24 at dropout 0.1)"
    assert default_describe(shipped, [{"seed": 25}], leg, config) == (
        "v2 + legs 3 to 26 (default-v2-continue; leg 25 kept, leg 26: 4,000 steps, bfloat16, peak lr 1e-4, dropout 0.1)"
    )
    assert default_describe("v2", [], leg, {"lr": 3e-3}).startswith(
        "v2 + leg 26 (default-v2-continue; leg 26: 4,000 steps, bfloat16, peak lr 3e-3, dropout 0)"
    )
    assert "legs 19 to 25 kept" in default_describe("v2 + legs 3 to 18", [{"seed": s} for s in range(19, 26)], leg, config)


def _refit(folder: Path, model: Path, bias: float) -> Path:
    """A `refit-bias` output for ``model``: its files, the softmax bias set to ``bias``, refit.json."""
    shutil.copytree(model, folder)
    state = torch.load(folder / "softmax.pt", weights_only=True)
    torch.save({**state, "bias": torch.full_like(state["bias"], bias)}, folder / "softmax.pt")
    sha = hashlib.sha256((folder / "weights.pt").read_bytes()).hexdigest()
    settings = {"sentences": 4000, "iterations": 4}
    record = {"input": {"path": "/somewhere/model", "weights_sha256": sha}, "data": "/somewhere/corpus/mixed-v2", "contexts": 12,
              "settings": settings, "history": [{"mean_abs_log_ratio": 0.5}], "weights_sha256": sha}  # fmt: skip
    (folder / "refit.json").write_text(json.dumps(record))
    return folder


def test_a_refit_leg_ships_the_refit_softmax_it_was_measured_with(tmp_path):
    shipped, kept, run, _, candidate, places = _kept_before_measured(tmp_path)
    refit = _refit(tmp_path / "refit", run / "model", 0.25)
    plain = tmp_path / "plain" / "package"  # the leg without its refit: not what the report measured
    _model(plain, b"leg 17")
    before = _state(shipped, *[places[k] for k in ("baseline_path", "figures_path", "project_path")])
    with pytest.raises(ShipRefused, match="does not hold .*refit softmax"):
        ship_leg(run, kept, plain, candidate, "v2", refit=refit, **places)
    other = _refit(tmp_path / "other-refit", shipped, 0.25)  # another model's bias
    with pytest.raises(ShipRefused, match="refit another model's bias"):
        ship_leg(run, kept, plain, candidate, "v2", refit=other, **places)
    package = tmp_path / "package"
    shutil.rmtree(package)
    shutil.copytree(refit, package)
    with pytest.raises(ShipRefused, match="pass --refit"):
        ship_leg(run, kept, package, candidate, "v2", **places)
    assert _state(shipped, *[places[k] for k in ("baseline_path", "figures_path", "project_path")]) == before
    snapshot = ship_leg(run, kept, package, candidate, None, refit=refit, **places)
    assert torch.equal(torch.load(shipped / "softmax.pt", weights_only=True)["bias"], torch.full((2,), 0.25, dtype=torch.float16))
    assert (shipped / "weights.pt").read_bytes() == b"leg 17"
    assert snapshot["output_bias_refit"]["contexts"] == 12 and snapshot["output_bias_refit"]["data"] == "mixed-v2"
    record = json.loads((shipped / "refit.json").read_text())
    assert "/somewhere" not in json.dumps(record) and record["weights_sha256"] == hashlib.sha256(b"leg 17").hexdigest()
    assert "output bias refit on 4,000 training sentences" in json.loads(places["baseline_path"].read_text())["model"]


def test_the_precision_a_leg_ran_in_is_named_as_the_config_names_it(tmp_path):
    from ship_leg import ran_precision

    for logged, named in (("bfloat16", "bf16"), ("float32-fused", "fp32-fused"), ("float32", "fp32-fused")):
        (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 20, "loss": 9.0, "precision": logged}) + "\n")
        assert ran_precision(tmp_path) == named


def test_a_refit_of_the_output_vectors_too_is_named_and_its_reads_kept():
    from ship_leg import refit_summary, refit_words

    record: Dict[str, Any] = {
        "data": "corpus/mixed-v2",
        "contexts": 10,
        "settings": {"sentences": 4000, "row_sentences": 12000},
        "history": [],
        "rows": {"contexts": 20, "valid_contexts": 5, "reads": [{"step": 0, "contexts": 0, "valid_ppl": 9.0}]},
    }
    assert refit_words(record) == "output bias refit on 4,000 training sentences, output vectors on 12,000"
    assert refit_summary(record)["rows"] == record["rows"] and refit_summary(record)["data"] == "mixed-v2"
    bias_only = {k: v for k, v in record.items() if k != "rows"}
    assert refit_words(bias_only) == "output bias refit on 4,000 training sentences" and "rows" not in refit_summary(bias_only)
