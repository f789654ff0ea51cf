"""The prepared GPU training leg (``project/scripts/gpu_leg.py``), rehearsed on the CPU at a tiny scale."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from spacy_elmo import load_bilm
from spacy_elmo.training import prepare_corpus, train

from .test_training import GENERAL, tiny_config, write_corpus

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "project" / "scripts" / "gpu_leg.py"
CONFIG = REPO / "project" / "configs" / "gpu-leg.json"


def leg(*args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env)


def test_pack_then_run_writes_an_embeddable_snapshot_and_resumes(tmp_path):
    corpus = prepare_corpus([write_corpus(tmp_path / "text", GENERAL)], tmp_path / "prep", shard_size=60)
    init = tmp_path / "init"
    train(tiny_config(tmp_path / "prep", init, max_steps=4))
    packed = tmp_path / "packed"
    done = leg("pack", str(tmp_path / "prep"), str(packed), "--max-mb", "0.003")
    assert done.returncode == 0, done.stderr
    record = json.loads((packed / "pack.json").read_text())
    n_shards = len(list((tmp_path / "prep" / "train").glob("shard-*.txt")))
    assert 1 <= record["train_shards"] < n_shards, (record, corpus)  # the budget cut the subset short
    assert sum(p.stat().st_size for p in packed.rglob("*") if p.is_file()) <= 0.003e6

    common = ["--init", str(init / "model"), "--run", str(tmp_path / "run"), "--out", str(tmp_path / "snap"), "--config", str(CONFIG)]
    tiny = ["--max-tokens", "256", "--n-samples", "0"]
    first = leg("run", str(packed), *common, *tiny, "--max-steps", "3")
    assert first.returncode == 0, first.stderr
    out = json.loads((tmp_path / "snap" / "leg.json").read_text())
    assert out["device"] == "cpu" and out["result"]["step"] == 3
    assert (tmp_path / "snap" / "weights.pt").is_file()
    assert torch.load(tmp_path / "snap" / "softmax.pt", weights_only=True)["weight"].dtype == torch.float16
    assert load_bilm(tmp_path / "snap").config.lstm_dim == load_bilm(init / "model").config.lstm_dim  # same shape
    second = leg("run", str(packed), *common, *tiny, "--max-steps", "5")  # continues the run folder's checkpoint
    assert second.returncode == 0, second.stderr
    assert json.loads((tmp_path / "snap" / "leg.json").read_text())["result"]["step"] == 5
    too_small = leg("run", str(packed), *common, *tiny, "--max-steps", "5", "--max-file-mib", "0.001")
    assert too_small.returncode != 0 and "over 0.001 MiB" in too_small.stderr


def test_pack_refuses_a_folder_that_is_not_a_prepared_corpus(tmp_path):
    done = leg("pack", str(tmp_path), str(tmp_path / "out"))
    assert done.returncode != 0 and "not a prepared corpus" in done.stderr
