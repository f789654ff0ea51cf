"""``project/scripts/lr_pilot.py``: the legs' pilots read per token or per minute of one core."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lr_pilot import main


def _arm(folder: Path, lr: float, minutes_per_step: float, with_clock: bool = True) -> Path:
    folder.mkdir(parents=True)
    (folder / "train_config.json").write_text(json.dumps({"lr": lr, "seed": 35, "max_steps": 1000, "dropout": 0.0}))
    rows = []
    for step, ppl in ((500, 99.7), (1000, 99.1)):
        rows.append({"step": step, "tokens": step * 3900, "loss": 9.0, "elapsed_s": step * minutes_per_step * 60})
        valid = {"step": step, "tokens": step * 3900, "valid_ppl_avg": ppl}
        if with_clock:
            valid["clock_minutes"] = step * minutes_per_step
        rows.append(valid)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_arms_of_other_speeds_are_read_per_minute(tmp_path):
    narrow = _arm(tmp_path / "narrow", 1e-4, 0.025)
    wide = _arm(tmp_path / "wide", 1e-4, 0.037)
    out = tmp_path / "pilot.json"
    assert main([f"1024={wide}", f"512={narrow}", "--x", "minutes", "--json", str(out), "--png", str(tmp_path / "p.png")]) == 0
    arms = json.loads(out.read_text())["arms"]
    assert [v["minutes"] for v in arms["1024"]["valid"]] == [18.5, 37.0] and [v["minutes"] for v in arms["512"]["valid"]] == [12.5, 25.0]
    assert (tmp_path / "p.png").stat().st_size > 0


def test_minutes_need_each_arms_clock(tmp_path):
    old = _arm(tmp_path / "old", 1e-4, 0.025, with_clock=False)
    with pytest.raises(SystemExit, match="clock_minutes"):
        main([f"old={old}", "--x", "minutes", "--png", str(tmp_path / "p.png")])
