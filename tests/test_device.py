"""Device-correctness that a CPU-only run can check (bench/gpu_check.py checks the rest on a GPU).

``Tensor.numpy()`` fails on a GPU tensor, so every ``.numpy()`` in the package must either read a
tensor that went through ``.cpu()`` or be one of the listed calls on tensors that are made on
the CPU and never moved (each with the reason). A new ``.numpy()`` on a tensor that may live on
a GPU (as the fine-tuning optimizer step once had) fails this test.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch

PACKAGE = Path(__file__).resolve().parent.parent / "spacy_elmo"

# (file relative to the package, enclosing function) -> why its tensor is always on the CPU
CPU_ONLY: Dict[Tuple[str, str], str] = {
    ("embedding/worker.py", "reduce"): "a CPU ScalarMix over a NumPy array (torch.from_numpy)",
}


def numpy_calls() -> List[Tuple[str, str, int, bool]]:
    """(file, function, line, goes through .cpu()) for every ``X.numpy()`` in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        enclosing: Dict[int, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    enclosing[id(sub)] = node.name  # innermost wins: walk visits outer first
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "numpy" and not node.args:
                chain, via_cpu = node.func.value, False
                while isinstance(chain, (ast.Call, ast.Attribute)):
                    if isinstance(chain, ast.Attribute) and chain.attr == "cpu":
                        via_cpu = True
                    chain = chain.func if isinstance(chain, ast.Call) else chain.value
                found.append((path.relative_to(PACKAGE).as_posix(), enclosing.get(id(node), "<module>"), node.lineno, via_cpu))
    return found


def test_every_numpy_call_reads_a_cpu_tensor():
    calls = numpy_calls()
    assert calls, "the scan found no .numpy() call at all: it is broken"
    unsafe = [f"{f}:{line} in {fn}()" for f, fn, line, via_cpu in calls if not via_cpu and (f, fn) not in CPU_ONLY]
    assert not unsafe, "Tensor.numpy() on a tensor that may be on a GPU (use .cpu() or thinc's torch2xp): " + ", ".join(unsafe)
    stale = set(CPU_ONLY) - {(f, fn) for f, fn, _, via_cpu in calls if not via_cpu}
    assert not stale, f"CPU_ONLY lists calls that no longer exist: {sorted(stale)}"


def test_the_scan_catches_the_fine_tuning_bug(tmp_path, monkeypatch):
    """The optimizer step as it was (``param.data.numpy()``) is reported."""
    bad = tmp_path / "spacy_elmo"
    bad.mkdir()
    (bad / "shim.py").write_text("def finish_update(param):\n    return param.data.numpy(), param.grad.cpu().numpy()\n")
    monkeypatch.setitem(globals(), "PACKAGE", bad)
    calls = numpy_calls()
    assert sorted((fn, via_cpu) for _, fn, _, via_cpu in calls) == [("finish_update", False), ("finish_update", True)]


def test_fine_tuning_step_keeps_parameters_on_their_device_and_dtype():
    """``finish_update`` with frozen=False: the optimizer sees arrays of the parameters' device
    (NumPy here, CuPy on a GPU) and the updated parameters stay torch tensors on that device."""
    from thinc.api import Adam

    from spacy_elmo.hub import load_bilm
    from spacy_elmo.layers.bilm_model import BiLMShim

    from .conftest import ALLENNLP

    shim = BiLMShim(bilm=None)
    shim.configure(frozen=False)
    shim.set_bilm(load_bilm(ALLENNLP))
    bilm = shim.bilm
    before = {n: p.detach().clone() for n, p in bilm.named_parameters()}
    from spacy_elmo.bilm import TokenBatch

    bilm(TokenBatch.from_sentences([["a", "b", "c"]])).sum().backward()
    shim.finish_update(Adam(0.01))
    changed = 0
    for name, param in bilm.named_parameters():
        assert param.device.type == "cpu" and param.dtype == torch.float32 and isinstance(param, torch.nn.Parameter)
        changed += int(not torch.equal(param.detach(), before[name]))
        assert param.grad is None or not param.grad.any()
    assert changed > 0
    assert np.isfinite(bilm.embed_sentences([["a", "b"]])[0]).all()


def test_gpu_check_script_rehearses_on_the_cpu(tmp_path):
    """bench/gpu_check.py's parity step in its CPU dry run, and its one-line refusal of a bad step."""
    import json
    import subprocess
    import sys

    script = PACKAGE.parent / "bench" / "gpu_check.py"
    result = subprocess.run([sys.executable, script, "--dry-run", "--steps", "parity", "--work", tmp_path, "--json", tmp_path / "r.json"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["parity"]["ok"] and report["parity"]["min_cos_bf16"] > 0.99 and report["device"] == "cpu"
    bad = subprocess.run([sys.executable, script, "--dry-run", "--steps", "parity,warp"], capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "unknown step(s) warp" in bad.stderr
