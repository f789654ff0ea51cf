"""``spacy project run change``: adapt the embedded default to nineteenth-century books and modern
text, then measure and explain which words changed, end to end at a tiny scale (two fine-tuning
steps, two words) on the samples bundled with the project."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spacy_elmo.induction import DEFAULT_REPRESENTATION

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "project"


@pytest.mark.slow
def test_the_change_workflow_runs_at_a_tiny_scale(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(PROJECT / "project.yml", root)
    for folder in ("configs", "assets/general_sample", "assets/modern_sample"):
        shutil.copytree(PROJECT / folder, root / folder)
    tiny = {**json.loads((PROJECT / "configs" / "finetune-change.json").read_text()),
            "max_steps": 2, "warmup_steps": 1, "n_samples": 64, "max_tokens": 512, "eval_every": 2, "checkpoint_every": 2, "eval_sentences": 20}
    (root / "configs" / "tiny-change.json").write_text(json.dumps(tiny))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "spacy", "project", "run", "change", str(root),
           "--vars.change_finetune_config", "configs/tiny-change.json", "--vars.change_words", "party,field"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    metrics = [json.loads(line) for line in (root / "training" / "change-adapted" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in metrics) == 2  # the default was adapted (two steps) before measuring
    report = json.loads((root / "metrics" / "change" / "report.json").read_text())
    assert report["corpora"] == {"a": "books-1845-1898", "b": "modern"}
    assert [w["word"] for w in report["words"]] and {w["word"] for w in report["words"]} == {"party", "field"}
    assert all(w["measures"] and w["senses"] for w in report["words"])
    assert report["settings"]["induction"]["representation"] == DEFAULT_REPRESENTATION  # the default, as a user runs it
    for word in ("party", "field"):
        assert (root / "metrics" / "change" / "senses" / f"{word}.json").is_file()
        assert (root / "metrics" / "change" / "pages" / f"{word}.html").is_file()
