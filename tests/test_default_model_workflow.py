"""``spacy project run default-model``: the shipped default's recipe (stage 1 on the books, stage 4
on books + modern text with the written-out schedule, ship, and the closing comparison with the
shipped model), run end to end at a tiny scale: a few steps of a tiny biLM on the bundled samples."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spacy_elmo.training.trainer import TrainConfig, lr_at

from .test_default_recipe import make_root

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "project"
TINY_ARCH = {"lstm_dim": 32, "projection_dim": 16, "char_dim": 8, "filters": [[1, 16], [2, 16], [3, 32]], "n_highway": 1}


@pytest.mark.slow
def test_the_default_model_workflow_runs_at_a_tiny_scale(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(PROJECT / "project.yml", root)
    for folder in ("configs", "scripts", "assets/general_sample", "assets/modern_en_sample"):
        shutil.copytree(PROJECT / folder, root / folder)
    # the real stage configs, shrunk: same fields and schedule shape, a few steps of a tiny model
    stage1 = {**json.loads((PROJECT / "configs" / "full.json").read_text()), **TINY_ARCH,
              "max_steps": 6, "warmup_steps": 2, "n_samples": 64, "max_tokens": 512, "eval_every": 3, "checkpoint_every": 3,
              "eval_sentences": 20, "log_every": 1}
    stage4 = {**json.loads((PROJECT / "configs" / "default-stage4.json").read_text()),
              "max_steps": 8, "warmup_steps": 1, "lr_horizons": [[0, 12], [3, 5], [5, 8]], "n_samples": 64, "max_tokens": 512,
              "eval_every": 4, "checkpoint_every": 2, "eval_sentences": 20, "log_every": 1, "precision": "fp32"}
    v2 = {**json.loads((PROJECT / "configs" / "default-v2.json").read_text()),
          "max_steps": 5, "warmup_steps": 1, "lr_horizons": [[0, 6]], "n_samples": 64, "max_tokens": 512,
          "eval_every": 5, "checkpoint_every": 2, "eval_sentences": 20, "log_every": 1, "precision": "fp32"}
    (root / "configs" / "tiny-v2.json").write_text(json.dumps(v2))
    (root / "configs" / "tiny-stage1.json").write_text(json.dumps(stage1))
    (root / "configs" / "tiny-stage4.json").write_text(json.dumps(stage4))
    (tmp_path / "bench").symlink_to(REPO / "bench", target_is_directory=True)  # the project's ../bench, as in a clone
    data = make_root(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "spacy", "project", "run", "default-model", str(root),
           "--vars.books", "assets/general_sample", "--vars.data_root", str(data),
           "--vars.stage1_config", "configs/tiny-stage1.json", "--vars.default_stage4_config", "configs/tiny-stage4.json",
           "--vars.default_eval_limit", "30"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    # both stages ran their step budgets, stage 4 from stage 1's model, on the written-out schedule
    s1 = [json.loads(line) for line in (root / "training" / "full-general" / "metrics.jsonl").read_text().splitlines()]
    s4 = [json.loads(line) for line in (root / "training" / "default-stage4" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in s1) == 6 and max(r["step"] for r in s4) == 8
    saved = json.loads((root / "training" / "default-stage4" / "train_config.json").read_text())
    assert saved["lr_horizons"] == [[0, 12], [3, 5], [5, 8]] and saved["init_model"].endswith("full-general/model")
    config = TrainConfig(**saved)
    assert [r["lr"] for r in s4 if "lr" in r] == pytest.approx([lr_at(step, config) for step in range(8)])
    assert (root / "packages" / "en_default-rebuilt" / "softmax.pt").is_file()

    # the closing table: the shipped model's figures beside the rebuilt one's, measured now
    table = (root / "metrics" / "default-compare.md").read_text()
    assert "| measure | shipped (`en_default`) | rebuilt |" in table and "Gutenberg test books" in table and "UD EWT" in table
    figures = json.loads((root / "metrics" / "default-compare.json").read_text())["figures"]
    assert set(figures["shipped"]) == set(figures["rebuilt"]) == {"books", "ud", "senses"}
    assert figures["shipped"]["books"] < figures["rebuilt"]["books"]  # 14 steps of a tiny model do not beat the shipped one
    assert "| measure | shipped" in run.stdout

    # the v2 candidate: stage 4's biLM continued on the mixed corpus with that corpus's own vocabulary
    cmd_v2 = [sys.executable, "-m", "spacy", "project", "run", "default-model-v2", str(root),
              "--vars.books", "assets/general_sample", "--vars.data_root", str(data),
              "--vars.default_v2_config", "configs/tiny-v2.json", "--vars.modern_en", "assets/modern_en_sample"]
    run_v2 = subprocess.run(cmd_v2, capture_output=True, text=True, env=env, timeout=1800)
    assert run_v2.returncode == 0, run_v2.stdout[-3000:] + run_v2.stderr[-3000:]
    v2_saved = json.loads((root / "training" / "default-v2" / "train_config.json").read_text())
    assert v2_saved["init_model"].endswith("default-stage4/model") and v2_saved["vocab_from"] == "corpus"
    mixed_vocab = (root / "corpus" / "mixed-v2" / "vocab.txt").read_text(encoding="utf-8")
    assert (root / "training" / "default-v2" / "model" / "vocab.txt").read_text(encoding="utf-8") == mixed_vocab
    assert (root / "packages" / "en_default-v2" / "vocab.txt").read_text(encoding="utf-8") == mixed_vocab
    manifest = (root / "corpus" / "mixed-v2-input" / "manifest.tsv").read_text()
    assert "wikipedia.train.txt.gz\ttrain" in manifest and "books.train.txt.gz\ttrain" in manifest
    assert json.loads((root / "corpus" / "modern-test" / "stats.json").read_text())["test"]["tokens"] > 1000
