"""bench/train_precision.py's per-step split: every op's self time lands in one category, the
loss's backward nodes count as softmax, in-place products as matrix products."""

import argparse
import importlib.util
import math
from pathlib import Path

import pytest
import torch

from spacy_elmo.training import prepare_corpus

BENCH = Path(__file__).resolve().parents[1] / "bench" / "train_precision.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("train_precision_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_loss_nodes_stop_at_the_states(bench):
    states = torch.randn(4, 3, requires_grad=True)
    hidden = states.tanh()  # the encoder's last node: not the loss's
    weight = torch.randn(5, 3, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(hidden @ weight.t(), torch.tensor([0, 1, 2, 3]))
    nodes = bench._loss_nodes(loss, [hidden.grad_fn])
    assert int(hidden.grad_fn._sequence_nr()) not in nodes
    assert int(loss.grad_fn._sequence_nr()) in nodes and len(nodes) >= 3


def test_profile_splits_a_step_into_the_categories(bench, tmp_path):
    text = tmp_path / "text"
    text.mkdir()
    lines = [f"The {a} dog sees the {b} cat near the river." for a in ("old", "small", "dark", "quiet") for b in ("red", "big", "lazy")] * 10
    (text / "a.txt").write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    prepare_corpus([text], tmp_path / "prep", held_out=0.1)
    args = argparse.Namespace(
        data=tmp_path / "prep", init="", steps=2, samples=16, max_tokens=128, threads=1, seed=1, malloc_tuning="off", label="t", top=50
    )
    result = bench.profile(args)
    for name in ("fp32", "bf16"):
        row = result["summary"][name]
        assert math.isclose(sum(row["share"].values()), 1.0, rel_tol=1e-6)
        assert row["ms"]["matrix products"] > 0 and row["ms"]["elementwise"] > 0 and row["ms"]["softmax"] > 0 and row["ms"]["optimizer"] > 0
        ops = {entry["op"] for entry in row["top_ops"]}
        assert not any(op.startswith(("aten::mm ", "aten::bmm ", "aten::baddbmm")) and "[elementwise]" in op for op in ops), ops
    bf16_ops = {entry["op"] for entry in result["summary"]["bf16"]["top_ops"]}
    assert "aten::baddbmm_ [matrix products]" in bf16_ops  # the recurrence's in-place products
    assert any(op.startswith("SampledSoftmaxLossBackward") and op.endswith("[softmax]") for op in bf16_ops)
    table = bench.split_markdown([result])
    assert table.count("\n") == 4 and "| t | bf16 |" in table
