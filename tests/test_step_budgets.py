"""Step budgets: the learning-rate schedule written out (``lr_horizons``), as the shipped default's
stage 4 ran it, and a time cap that stops a run without changing its schedule."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from spacy_elmo.training.corpus import prepare_corpus
from spacy_elmo.training.trainer import TrainConfig, lr_at, train

from .test_training import GENERAL, tiny_config, write_corpus

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "project" / "configs"


def stage4() -> TrainConfig:
    return TrainConfig(**json.loads((CONFIGS / "default-stage4.json").read_text()))


def test_stage4_schedule_is_the_one_the_shipped_run_followed():
    """The model card's record of the run: the decay shortened at steps 2,700, 3,100 and 3,900, a
    warm restart at 4,600, 2.0e-4 at the end (docs/model-card.md, "Stage 4")."""
    config = stage4()
    assert config.max_steps == 9000 and config.max_minutes == 0 and config.precision == "bf16"
    # the lr of the log records (every 20 steps; a record at step N shows step N-1's lr) around each change
    records = {2700: 1.79e-3, 2720: 1.52e-3, 3100: 1.40e-3, 3120: 7.7e-4, 3900: 4.1e-4, 3920: 3.0e-4, 4620: 1.07e-3, 9000: 2.0e-4}
    for record, lr in records.items():
        step = record - 1
        assert lr_at(step, config) == pytest.approx(lr, abs=0.006e-3), step
    # the schedule before the first stop is the planned 12,000-step decay
    planned = TrainConfig(**{**json.loads((CONFIGS / "full-continue-bf16.json").read_text())})
    assert all(lr_at(s, config) == lr_at(s, planned) for s in range(0, 2700, 50))


def test_the_shipped_default_followed_its_leg_config():
    """The shipped default (v2 and its legs) ran the leg config, configs/default-v2-continue.json,
    with the project's per-leg settings: its seed the leg's number, its step budget the leg's own
    (``vars.default_v2_leg_steps``), ``auto`` resolved to a precision of the training kernels,
    shipped at the end of the leg's decay; the project's next leg is the one after it, or continues
    the one after it when that one missed the ship rule's margin, with the settings of the last leg
    shipped or kept (a pilot's choice, such as the legs' dropout, changes both together)."""
    leg = TrainConfig(**json.loads((CONFIGS / "default-v2-continue.json").read_text()))
    shipped = json.loads((REPO / "spacy_elmo" / "models" / "en_default" / "train_config.json").read_text())
    snapshot = json.loads((REPO / "spacy_elmo" / "models" / "en_default" / "snapshot.json").read_text())
    variables = yaml.safe_load((REPO / "project" / "project.yml").read_text())["vars"]
    # the next leg runs as the last leg ran: the shipped one's or, when it continues kept legs, the last kept one's
    continues_kept = variables["default_v2_continue_init"] != "../spacy_elmo/models/en_default"
    last = json.loads((REPO / "project" / "models" / "en_default-next" / "train_config.json").read_text()) if continues_kept else shipped
    same = ("warmup_steps", "n_samples", "dropout", "max_tokens", "max_length", "grad_clip", "vocab_from")
    assert {k: getattr(leg, k) for k in same} == {k: last[k] for k in same}
    # the peak learning rate: legs 3 to 15 ran at 1e-3, the shipped legs from 16 on at 1e-4, the schedule
    # pilot's choice (docs/model-card.md, "The legs' learning rate")
    assert shipped["lr"] == leg.lr
    assert leg.precision == "auto" and shipped["precision"] in ("fp32-fused", "bf16")
    number = int(re.search(r"\(seed (\d+)", snapshot["leg"]["run"]).group(1))  # a leg's seed is its number
    assert shipped["seed"] == number and shipped["max_steps"] == snapshot["leg"]["step"]  # shipped at the end of the leg
    shipped_leg = TrainConfig(
        **{**json.loads((CONFIGS / "default-v2-continue.json").read_text()), "max_steps": shipped["max_steps"], "lr": shipped["lr"]}
    )
    assert lr_at(snapshot["leg"]["step"] - 1, shipped_leg) == pytest.approx(0.1 * shipped["lr"], rel=1e-3)
    assert snapshot["tokens"] > snapshot["leg"]["tokens"]  # the card's cumulative tokens: every leg adds its own
    assert variables["default_v2_leg_steps"] >= leg.warmup_steps
    if not continues_kept:
        assert variables["default_v2_leg"] == number + 1
    else:  # legs that missed the margin, kept in the repository (tests/test_kept_legs.py), continued by the next
        assert variables["default_v2_continue_init"] == "models/en_default-next"
        assert variables["default_v2_leg"] > number + 1


def test_the_v2_legs_config_is_the_first_legs_record():
    """configs/default-v2-legs.json: the v2 run's schedule as it ran, its first horizon the step of
    the v2 default that shipped first (1,700)."""
    legs = TrainConfig(**json.loads((CONFIGS / "default-v2-legs.json").read_text()))
    assert legs.lr_horizons[0] == [0, 1700] and lr_at(1699, legs) == pytest.approx(0.1 * legs.lr, rel=1e-3)


def test_a_continuing_leg_is_a_warm_restart_on_a_step_budget():
    """`default-v2-continue` (one more leg for the shipped default): the v2 corpus's vocabulary, a
    short warm-up, a cosine decay that reaches 10% of its peak at its last step, no clock schedule."""
    leg = TrainConfig(**json.loads((CONFIGS / "default-v2-continue.json").read_text()))
    assert leg.vocab_from == "corpus" and leg.max_minutes == 0 and leg.time_cap_minutes > 0 and not leg.lr_horizons
    assert lr_at(leg.warmup_steps, leg) == pytest.approx(leg.lr)
    assert lr_at(leg.max_steps - 1, leg) == pytest.approx(0.1 * leg.lr, rel=1e-3)


def test_every_stage_of_the_full_workflow_has_a_step_budget_and_no_clock_schedule():
    """Stage 1 runs the 2,028 steps the shipped stage 1 ran; no config of the `full` and
    `default-model` workflows decays over wall time (a time cap only stops, and says so)."""
    stage1 = TrainConfig(**json.loads((CONFIGS / "full.json").read_text()))
    assert stage1.max_steps == 2028 and stage1.warmup_steps == 200 and stage1.seed == 0
    assert lr_at(2027, stage1) == pytest.approx(0.1 * stage1.lr, rel=1e-3)
    for name in ("full.json", "full-continue.json", "finetune-full.json", "default-stage4.json"):
        config = TrainConfig(**json.loads((CONFIGS / name).read_text()))
        assert config.max_minutes == 0 and config.time_cap_minutes > 0, name


@pytest.mark.parametrize(
    "horizons, message",
    [
        ([[0, 100], [0, 50]], "must rise"),
        ([[0, 3]], "past the warm-up"),
        ([[0]], "from_step, horizon"),
        ([[0, 10.5]], "from_step, horizon"),
    ],
)
def test_bad_horizons_are_refused(horizons, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(warmup_steps=5, lr_horizons=horizons)


def test_a_time_cap_stops_the_run_and_says_so_but_keeps_the_schedule(tmp_path):
    prepare_corpus([write_corpus(tmp_path / "general", GENERAL, n_train=100)], tmp_path / "prep")
    data = tmp_path / "prep"
    capped = tiny_config(data, tmp_path / "run", max_steps=50, time_cap_minutes=1e-9, lr_horizons=[[0, 30], [10, 50]])
    result = train(capped)
    assert result["stopped_early"] and result["stopped_by"] == "time_cap_minutes" and result["step"] < 50
    assert (tmp_path / "run" / "model" / "weights.pt").is_file()
    plain = tiny_config(data, tmp_path / "plain", max_steps=50, lr_horizons=[[0, 30], [10, 50]])
    assert [lr_at(s, capped, elapsed_minutes=100.0) for s in range(50)] == [lr_at(s, plain) for s in range(50)]
    # resumed without the cap, it runs its planned steps, logging the lr of the written-out schedule
    done = train(tiny_config(data, tmp_path / "run", max_steps=50, lr_horizons=[[0, 30], [10, 50]]), resume=True)
    assert done["step"] == 50 and not done["stopped_early"]
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for record in (r for r in logged if "lr" in r):
        assert record["lr"] == pytest.approx(lr_at(record["step"] - 1, plain))


def test_the_command_line_says_when_the_time_cap_fired(tmp_path, capsys):
    from spacy_elmo.cli import main

    prepare_corpus([write_corpus(tmp_path / "general", GENERAL, n_train=100)], tmp_path / "prep")
    config = tmp_path / "tiny.json"
    config.write_text(
        json.dumps(
            {
                "lstm_dim": 32,
                "projection_dim": 16,
                "char_dim": 8,
                "filters": [[1, 16], [2, 16]],
                "max_steps": 40,
                "warmup_steps": 2,
                "max_tokens": 512,
                "threads": 1,
                "eval_sentences": 20,
            }
        )
    )
    code = main(["pretrain", str(tmp_path / "prep"), str(tmp_path / "run"), "--config", str(config), "--time-cap-minutes", "1e-9"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "stopped by the time cap" in err + out and "of 40: not the planned run; --resume continues it" in err + out
    assert json.loads(out.strip().splitlines()[-1])["stopped_by"] == "time_cap_minutes"
