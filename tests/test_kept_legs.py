"""Legs of the default that missed the ship rule's margin, kept in the repository
(``project/scripts/keep_leg.py``, ``project/models/en_default-next``) so that no machine holds them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Dict

import pytest
import torch
import yaml
from keep_leg import keep_leg, main, sha256, valid_perplexity

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "spacy_elmo" / "models" / "en_default"
KEPT = REPO / "project" / "models" / "en_default-next"


def _model(folder: Path, weights: bytes) -> None:
    folder.mkdir(parents=True)
    (folder / "weights.pt").write_bytes(weights)
    (folder / "config.json").write_text(json.dumps({"sha256": {"weights.pt": hashlib.sha256(weights).hexdigest()}}))
    (folder / "vocab.txt").write_text("the\nbank\n")
    torch.save({"weight": torch.ones(2, 3), "bias": torch.zeros(2)}, folder / "softmax.pt")


def _shipped(tmp_path: Path) -> Path:
    shipped = tmp_path / "shipped"
    _model(shipped, b"shipped weights")
    snapshot = {"step": 1000, "tokens": 5_000_000, "elapsed_minutes": 100.0, "run": "v2 + legs 3 to 15"}
    (shipped / "snapshot.json").write_text(json.dumps(snapshot))
    return shipped


def _leg(tmp_path: Path, init: Path, seed: int, weights: bytes, finished: bool = True) -> Path:
    run = tmp_path / f"leg{seed}"
    if finished:
        _model(run / "model", weights)
    else:
        run.mkdir(parents=True)
    config: Dict[str, Any] = {"init_model": str(init), "seed": seed, "max_steps": 40, "lr": 1e-3, "precision": "auto", "log_every": 20}
    (run / "train_config.json").write_text(json.dumps(config))
    rows = [
        {"step": 20, "tokens": 80_000, "loss": 9.5, "elapsed_s": 60.0, "precision": "bfloat16"},
        {"step": 40, "tokens": 160_000, "loss": 9.4, "elapsed_s": 120.0, "precision": "bfloat16"},
        {"step": 40, "tokens": 160_000, "valid_ppl_fwd": 106.0, "valid_ppl_bwd": 104.0, "valid_ppl_avg": 105.0},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[: 3 if finished else 1]))
    return run


def test_a_kept_leg_carries_its_chain_and_the_next_leg_extends_it(tmp_path):
    shipped = _shipped(tmp_path)
    out = tmp_path / "next"
    first = keep_leg(_leg(tmp_path, shipped, 16, b"leg 16"), shipped, out, shipped=shipped)
    assert [x["seed"] for x in first["kept_legs"]] == [16] and first["kept_legs"][0]["valid_ppl_end"] == 105.0
    assert first["tokens"] == 5_160_000 and first["step"] == 1040 and first["elapsed_minutes"] == 102.0
    assert first["base_sha256"] == hashlib.sha256(b"shipped weights").hexdigest()
    assert (out / "weights.pt").read_bytes() == b"leg 16" and first["weights_sha256"] == sha256(out / "weights.pt")
    assert torch.load(out / "softmax.pt", weights_only=True)["weight"].dtype == torch.float16  # ship's layout
    # the next leg continues the kept folder and is kept over it, the chain growing
    second = keep_leg(_leg(tmp_path, out, 17, b"leg 17"), out, out, shipped=shipped, verdict="NOT SHIP")
    assert [x["seed"] for x in second["kept_legs"]] == [16, 17] and second["tokens"] == 5_320_000
    assert second["kept_legs"][1]["verdict"] == "NOT SHIP" and (out / "weights.pt").read_bytes() == b"leg 17"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("next")) == ["next"]  # no staging left
    again = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ValueError, match="already .*kept there"):  # the same leg kept a second time over its own start
        keep_leg(tmp_path / "leg17", out, out, shipped=shipped, verdict="not yet measured")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == again


def test_what_is_not_a_finished_leg_of_the_shipped_default_is_refused_and_nothing_is_lost(tmp_path):
    shipped = _shipped(tmp_path)
    out = tmp_path / "next"
    keep_leg(_leg(tmp_path, shipped, 16, b"leg 16"), shipped, out, shipped=shipped)
    kept = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ValueError, match="only a finished leg is kept"):
        keep_leg(_leg(tmp_path, out, 17, b"", finished=False), out, out, shipped=shipped)
    with pytest.raises(ValueError, match="not .*pass the folder the leg started from"):
        keep_leg(_leg(tmp_path / "x", shipped, 18, b"leg 18"), out, out, shipped=shipped)  # it continued another folder
    other = tmp_path / "other"
    _model(other, b"somebody else's model")
    with pytest.raises(ValueError, match="neither the shipped default nor kept legs"):
        keep_leg(_leg(tmp_path / "y", other, 19, b"leg 19"), other, out, shipped=shipped)
    (out / "weights.pt").write_bytes(b"changed after it was kept")
    with pytest.raises(ValueError, match="neither the shipped default nor kept legs"):
        keep_leg(_leg(tmp_path / "z", out, 20, b"leg 20"), out, out, shipped=shipped)
    (out / "weights.pt").write_bytes(kept["weights.pt"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == kept  # every refusal left the kept folder as it was
    assert main([str(tmp_path / "leg17"), "--init", str(out), "--out", str(out), "--shipped", str(shipped)]) == 2


def test_the_project_continues_the_kept_legs_of_the_shipped_default():
    """Where the project's next leg continues kept legs, they are in the repository, continue the
    shipped default's very weights, are unchanged since they were kept, and the next leg's number
    follows the last kept leg's; otherwise the next leg continues the shipped default."""
    variables = yaml.safe_load((REPO / "project" / "project.yml").read_text())["vars"]
    init = variables["default_v2_continue_init"]
    if init == "../spacy_elmo/models/en_default":
        assert not KEPT.exists(), "kept legs nobody continues: continue them (vars.default_v2_continue_init) or remove them"
        return
    assert init == "models/en_default-next" and (KEPT / "weights.pt").is_file()
    snapshot = json.loads((KEPT / "snapshot.json").read_text())
    shipped = json.loads((SHIPPED / "config.json").read_text())["sha256"]["weights.pt"]
    assert snapshot["base_sha256"] == shipped, "the kept legs continue a default that is no longer shipped"
    assert sha256(KEPT / "weights.pt") == snapshot["weights_sha256"]
    assert json.loads((KEPT / "config.json").read_text())["sha256"]["weights.pt"] == snapshot["weights_sha256"]
    legs = snapshot["kept_legs"]
    assert variables["default_v2_leg"] == legs[-1]["seed"] + 1
    base = json.loads((SHIPPED / "snapshot.json").read_text())
    assert snapshot["tokens"] == base["tokens"] + sum(x["tokens"] for x in legs)
    assert (KEPT / "vocab.txt").read_bytes() == (SHIPPED / "vocab.txt").read_bytes()


def _real_model(folder: Path, seed: int) -> None:
    from spacy_elmo.bilm.model import BiLM, BiLMConfig
    from spacy_elmo.training.data import Vocabulary
    from spacy_elmo.training.lm import BiLMLanguageModel
    from spacy_elmo.training.trainer import export_model

    torch.manual_seed(seed)
    folder.mkdir(parents=True)
    words = ["<S>", "</S>", "<UNK>", "the", "bank"]
    bilm = BiLM(BiLMConfig(lstm_dim=8, projection_dim=4, filters=((1, 4), (2, 4)), n_highway=1))
    export_model(BiLMLanguageModel(bilm, len(words)).eval(), Vocabulary(words), folder)


def test_sibling_runs_of_a_leg_are_kept_as_the_mean_of_their_weights(tmp_path):
    from spacy_elmo.training.trainer import load_language_model

    shipped = tmp_path / "shipped"
    _real_model(shipped, 0)
    (shipped / "snapshot.json").write_text(json.dumps({"step": 1000, "tokens": 5_000_000, "elapsed_minutes": 100.0, "run": "v2"}))
    runs = []
    for seed, model_seed in ((18, 1), (1018, 2)):
        run = _leg(tmp_path / str(seed), shipped, seed, b"")
        for name in ("weights.pt", "softmax.pt", "config.json", "vocab.txt"):
            (run / "model" / name).unlink()
        (run / "model").rmdir()
        _real_model(run / "model", model_seed)
        runs.append(run)
    out = tmp_path / "next"
    snapshot = keep_leg(runs[0], shipped, out, shipped=shipped, siblings=[runs[1]], valid_ppl=101.5)
    leg = snapshot["kept_legs"][0]
    assert leg["seed"] == 18 and [x["seed"] for x in leg["averaged"]] == [18, 1018]
    assert leg["tokens"] == 320_000 and leg["steps"] == 80 and leg["elapsed_minutes"] == 4.0 and leg["valid_ppl_end"] == 101.5
    assert snapshot["tokens"] == 5_000_000 + 320_000 and "the mean of seeds 18, 1018" in snapshot["leg"]["run"]
    kept, _ = load_language_model(out)  # verified against its recorded digest
    (a, _), (b, _) = (load_language_model(r / "model") for r in runs)
    for name in ("bilm.lstm.layers.0.w_state", "bilm.token_encoder.projection.weight", "softmax.weight"):
        expected = (a.state_dict()[name] + b.state_dict()[name]) / 2
        assert torch.allclose(kept.state_dict()[name], expected, atol=1e-3 if name == "softmax.weight" else 1e-6), name  # softmax: float16
    assert "18 + 1018 (mean)" in (out / "README.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("next")) == ["next"]  # no staging or soup left
    with pytest.raises(ValueError, match="pass the folder the leg started from"):
        keep_leg(runs[0], shipped, tmp_path / "again", shipped=shipped, siblings=[_leg(tmp_path / "elsewhere", tmp_path, 1019, b"x")])
    valid = tmp_path / "valid.json"
    valid.write_text(json.dumps({"split": "valid", "ppl_avg": 103.604, "tokens": 23442}))
    args = [str(runs[0]), "--init", str(shipped), "--out", str(tmp_path / "by-command"), "--shipped", str(shipped)]
    assert main(args + ["--sibling", str(runs[1]), "--valid-json", str(valid)]) == 0
    assert json.loads((tmp_path / "by-command" / "snapshot.json").read_text())["kept_legs"][0]["valid_ppl_end"] == 103.6
    valid.write_text(json.dumps({"split": "test", "ppl_avg": 99.0}))
    with pytest.raises(ValueError, match="not `evaluate --split valid"):
        valid_perplexity(valid)


def test_a_leg_kept_before_it_was_measured_gets_its_verdict_once_and_nothing_else_changes(tmp_path):
    shipped = _shipped(tmp_path)
    out = tmp_path / "next"
    keep_leg(_leg(tmp_path, shipped, 16, b"leg 16"), shipped, out, shipped=shipped, verdict="NOT SHIP")
    keep_leg(_leg(tmp_path, out, 17, b"leg 17"), out, out, shipped=shipped, verdict="not yet measured: kept as it ended")
    before = json.loads((out / "snapshot.json").read_text())
    weights = (out / "weights.pt").read_bytes()
    assert main([str(out), "--measured", "--verdict", "not shipped: modern -1.8%"]) == 0
    after = json.loads((out / "snapshot.json").read_text())
    assert after["kept_legs"][-1]["verdict"] == "not shipped: modern -1.8%"
    assert {**after, "kept_legs": after["kept_legs"][:-1]} == {**before, "kept_legs": before["kept_legs"][:-1]}
    assert {k: v for k, v in after["kept_legs"][-1].items() if k != "verdict"} == {
        k: v for k, v in before["kept_legs"][-1].items() if k != "verdict"
    }
    assert (out / "weights.pt").read_bytes() == weights and "modern -1.8%" in (out / "README.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("next")) == ["next"]
    # a measured leg keeps its verdict; an empty or unmeasured verdict is not one
    assert main([str(out), "--measured", "--verdict", "SHIP"]) == 2
    assert json.loads((out / "snapshot.json").read_text()) == after
    keep_leg(_leg(tmp_path / "x", out, 18, b"leg 18"), out, out, shipped=shipped, verdict="not yet measured")
    for verdict in ("", "not yet measured again"):
        assert main([str(out), "--measured", "--verdict", verdict]) == 2


def _widened(tmp_path: Path, source: Path, weights: bytes) -> Path:
    """What ``spacy_elmo widen`` writes: a model folder with its ``widen.json`` naming the source's weights."""
    folder = tmp_path / "wide-init"
    _model(folder, weights)
    record = {
        "source_weights_sha256": sha256(source / "weights.pt"),
        "cell_dim": {"from": 512, "to": 1024},
        "seed": 35,
        "method": "copy",
        "weights_sha256": sha256(folder / "weights.pt"),
    }
    (folder / "widen.json").write_text(json.dumps(record))
    return folder


def test_a_leg_from_a_widened_start_is_kept_with_its_widening_and_a_forged_start_is_refused(tmp_path):
    shipped = _shipped(tmp_path)
    out = tmp_path / "next"
    keep_leg(_leg(tmp_path, shipped, 16, b"leg 16"), shipped, out, shipped=shipped)
    # a widened start whose weights were changed after widening, or that widened another model, is refused
    changed = _widened(tmp_path / "y", out, b"leg 16 widened")
    (changed / "weights.pt").write_bytes(b"changed")
    with pytest.raises(ValueError, match="the widened start was changed"):
        keep_leg(_leg(tmp_path / "y", changed, 18, b"leg 18"), out, out, shipped=shipped)
    other = _widened(tmp_path / "z", shipped, b"the shipped default widened")
    with pytest.raises(ValueError, match="a widening of other weights"):
        keep_leg(_leg(tmp_path / "z", other, 18, b"leg 18"), out, out, shipped=shipped)
    assert (out / "weights.pt").read_bytes() == b"leg 16"  # nothing kept by a refused leg
    wide = _widened(tmp_path, out, b"leg 16 widened")
    kept = keep_leg(_leg(tmp_path, wide, 17, b"leg 17, wide"), out, out, shipped=shipped)
    assert (
        kept["kept_legs"][1]["widened"] == {"from": 512, "to": 1024, "method": "copy", "seed": 35} and "widened" not in kept["kept_legs"][0]
    )
    assert "17 (cells 512 -> 1024)" in (out / "README.md").read_text()
