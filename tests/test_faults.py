"""Faults: training killed with SIGKILL and resumed, conflicting resume flags, damaged files."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from spacy_elmo.cli import main
from spacy_elmo.training import TrainConfig, prepare_corpus, train
from spacy_elmo.training.corpus import read_vocab
from spacy_elmo.training.data import read_shard
from spacy_elmo.training.trainer import load_checkpoint

from .test_training import GENERAL, tiny_config, write_corpus

TINY = dict(lstm_dim=32, projection_dim=16, char_dim=8, filters=[[1, 16], [2, 16], [3, 32]], n_highway=1, max_steps=150,
            warmup_steps=5, lr=1e-2, max_tokens=512, log_every=5, eval_every=1000, eval_sentences=50, checkpoint_every=1,
            threads=1, dropout=0.2, n_samples=20, seed=3)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    prepare_corpus([write_corpus(root / "raw", GENERAL, n_train=300)], root / "prep")
    return root / "prep"


def _pretrain(data: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "spacy_elmo", "pretrain", str(data), str(out), *extra]
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _step(checkpoint: Path) -> int:
    """The step of the last complete checkpoint (0 before the first)."""
    try:
        return int(load_checkpoint(checkpoint)["step"]) if checkpoint.exists() else 0
    except ValueError:  # replaced between the check and the read
        return 0


def test_sigkill_at_random_points_then_resume_gives_the_uninterrupted_weights(data, tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    straight = tmp_path / "straight"
    train(TrainConfig(data_dir=str(data), out_dir=str(straight), **TINY))
    out = tmp_path / "killed"
    checkpoint = out / "checkpoints" / "last.pt"
    rng = random.Random(0)
    targets = [rng.randint(10, 40), rng.randint(55, 85), rng.randint(100, 130)]  # a kill once each step is passed
    steps_at_kill = []
    process = _pretrain(data, out, "--config", str(config))
    for target in targets:
        while process.poll() is None and _step(checkpoint) < target:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.05))  # checkpoints are written every step: kills land inside writes too
        assert process.poll() is None, "the run ended before it could be killed"
        process.send_signal(signal.SIGKILL)
        process.wait()
        steps_at_kill.append(load_checkpoint(checkpoint)["step"])  # never half-written: it loads
        process = _pretrain(data, out, "--resume")  # the rest of the settings come from the checkpoint
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err.decode()
    kills = len(steps_at_kill)
    assert kills == 3 and steps_at_kill == sorted(steps_at_kill) and steps_at_kill[-1] < TINY["max_steps"]
    a, b = load_checkpoint(straight / "checkpoints" / "last.pt"), load_checkpoint(checkpoint)
    assert a["step"] == b["step"] == TINY["max_steps"] and a["position"] == b["position"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines() if "train_ppl_fwd" in x]
    assert steps == list(range(TINY["log_every"], TINY["max_steps"] + 1, TINY["log_every"]))  # none logged twice
    assert not checkpoint.with_suffix(".tmp").exists()


def test_resume_refuses_a_flag_that_disagrees_with_the_checkpoint(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(tiny_config(data, out, max_steps=8, checkpoint_every=2), interrupt_at=4)["interrupted"]
    code = main(["pretrain", str(data), str(out), "--resume", "--lr", "0.5"])
    err = capsys.readouterr().err
    assert code == 2 and "lr is 0.5 now but 0.01 in the checkpoint" in err and "last.pt" in err
    with pytest.raises(ValueError, match="lstm_dim is 64 now but 32"):
        train(tiny_config(data, out, max_steps=8, lstm_dim=64), resume=True)
    # the settings a resumed run may change, change
    result = train(tiny_config(data, out, max_steps=6, checkpoint_every=2, log_every=3), resume=True)
    assert result["step"] == 6


def test_a_damaged_checkpoint_names_the_file_and_a_stale_partial_write_is_ignored(data, tmp_path):
    out = tmp_path / "run"
    train(tiny_config(data, out, max_steps=4, checkpoint_every=2), interrupt_at=2)
    checkpoint = out / "checkpoints" / "last.pt"
    checkpoint.with_suffix(".tmp").write_bytes(b"half a write")  # what a kill during torch.save leaves
    assert train(tiny_config(data, out, max_steps=4, checkpoint_every=2), resume=True)["step"] == 4
    assert not checkpoint.with_suffix(".tmp").exists()
    data_bytes = checkpoint.read_bytes()
    checkpoint.write_bytes(data_bytes[: len(data_bytes) // 3])
    with pytest.raises(ValueError, match=r"checkpoint .*last\.pt cannot be read"):
        train(tiny_config(data, out, max_steps=6), resume=True)
    torch.save({"model": {}}, checkpoint)
    with pytest.raises(ValueError, match="lacks optimizer"):
        load_checkpoint(checkpoint)


def test_damaged_shards_and_vocabularies_name_the_file(tmp_path):
    shard = tmp_path / "shard-00000.txt"
    shard.write_bytes(b"a good line\nbad \xff bytes\n")
    with pytest.raises(ValueError, match=r"shard-00000\.txt: not UTF-8"):
        read_shard(shard, 50)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<S>\t1\n</S>\t1\n<UNK>\t0\nthe\tmany\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab\.txt, line 4: the count 'many'"):
        read_vocab(vocab)
    vocab.write_text("<S>\t1\n</S>\t1\n<UNK>\t0\nthe\t3\nthe\t2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="duplicated"):
        read_vocab(vocab)
    vocab.write_text("the\t3\n", encoding="utf-8")
    with pytest.raises(ValueError, match="must start with"):
        read_vocab(vocab)
