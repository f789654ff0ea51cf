"""``bench/reference.py allennlp``'s contract with ``bench/parity.py allennlp`` and bench/bench.py (one
array per input line in input order, blank lines as zero tokens, the ``ref ...`` speed line), checked
here with a stand-in for AllenNLP's ELMo built on our own biLM: the real reference needs AllenNLP's
virtualenv (docs/benchmarks.md), which CI does not have. What this cannot check is AllenNLP's
numbers; ``bench/parity.py allennlp`` measures those."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from spacy_elmo import load_bilm
from spacy_elmo.hub.random_weights import write_random_weights

REPO = Path(__file__).resolve().parent.parent
TINY = {
    "lstm": {"n_layers": 2, "dim": 32, "projection_dim": 8, "cell_clip": 3, "proj_clip": 3, "use_skip_connections": True},
    "char_cnn": {"filters": [[1, 4], [2, 8]], "n_highway": 1, "embedding": {"dim": 4}, "activation": "relu",
                 "n_characters": 262, "max_characters_per_token": 50},
}
STAND_IN = {
    "allennlp/__init__.py": "__version__ = 'stand-in'\n",
    "allennlp/modules/__init__.py": "",
    "allennlp/nn/__init__.py": "",
    "allennlp/modules/elmo.py": """
        import torch
        from spacy_elmo import load_bilm

        def batch_to_ids(batch):
            return [list(words) for words in batch]

        class _State:
            def reset_states(self):
                pass

        class _ElmoBiLm(torch.nn.Module):
            # AllenNLP's output layout: activations with <S>/</S>, padded; a mask over them
            def __init__(self, options, weights):
                super().__init__()
                self.bilm = load_bilm(options_file=options, weight_file=weights)
                self._elmo_lstm = _State()

            def forward(self, sentences):
                arrays = self.bilm.embed_sentences(sentences, keep_boundaries=True)
                width = max(a.shape[1] for a in arrays)
                layers, dim = arrays[0].shape[0], arrays[0].shape[2]
                acts = torch.zeros(layers, len(arrays), width, dim)
                mask = torch.zeros(len(arrays), width, dtype=torch.long)
                for i, a in enumerate(arrays):
                    acts[:, i, : a.shape[1]] = torch.from_numpy(a)
                    mask[i, : a.shape[1]] = 1
                return {"activations": list(acts), "mask": mask}
        """,
    "allennlp/nn/util.py": """
        import torch

        def remove_sentence_boundaries(tensor, mask):
            lengths = mask.sum(1) - 2
            out = torch.zeros(tensor.shape[0], tensor.shape[1] - 2, tensor.shape[2], dtype=tensor.dtype)
            for i, n in enumerate(lengths.tolist()):
                out[i, :n] = tensor[i, 1 : n + 1]
            return out, None
        """,
}


def test_the_reference_harness_writes_every_line_in_order(tmp_path):
    spec = tmp_path / "tiny.json"
    spec.write_text(json.dumps(TINY))
    options, weights = write_random_weights(str(spec), tmp_path / "w", seed=2)
    for name, code in STAND_IN.items():
        (tmp_path / "fake" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fake" / name).write_text(textwrap.dedent(code))
    lines = ["The bank lends money .", "", "x", "He sat on the river bank and watched the boats .", "Yes ."]
    text = tmp_path / "s.txt"
    text.write_text("".join(line + "\n" for line in lines))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(REPO)])}
    cmd = [sys.executable, str(REPO / "bench" / "reference.py"), "allennlp", "--options", str(options), "--weights", str(weights),
           "--input", str(text), "--batch-size", "2"]
    out = subprocess.run([*cmd, "--out", str(tmp_path / "ref.npz"), "--bench"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    ours = load_bilm(options_file=options, weight_file=weights).embed_sentences([line.split() for line in lines])
    with np.load(tmp_path / "ref.npz") as npz:
        assert sorted(npz.files, key=int) == [str(i) for i in range(len(lines))]
        for i, array in enumerate(ours):
            assert npz[str(i)].shape == array.shape == (3, len(lines[i].split()), 16)
            assert npz[str(i)].dtype == np.float32 and np.allclose(npz[str(i)], array, atol=1e-5)
    speed = next(line for line in out.stdout.splitlines() if line.startswith("ref "))
    fields = dict(item.split("=") for item in speed.split()[1:])
    assert fields["sentences"] == "4" and fields["tokens"] == str(sum(len(line.split()) for line in lines)) and float(fields["tokens_per_s"]) > 0
