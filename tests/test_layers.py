"""spacy_elmo.layers: one mix behind the thinc layer, imports in any order, one registration place."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from spacy.util import registry

import spacy_elmo.layers as layers
from spacy_elmo import ScalarMix

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("layer_norm", [False, True])
def test_thinc_mix_is_the_torch_mix(layer_norm):
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=(3, n, 8)).astype(np.float32) for n in (4, 1, 6)]
    model = layers.ScalarMix_v1(init=[1, 2, 5], gamma=0.7, layer_norm=layer_norm)
    model.initialize(X=inputs)
    module = ScalarMix(3, [1, 2, 5], gamma=0.7, layer_norm=layer_norm)  # trainable: the same starting logits
    assert np.allclose(model.get_param("s"), module.scalar_parameters.detach().numpy())
    outputs = model.predict(inputs)
    for array, out in zip(inputs, outputs):
        assert np.allclose(out, module(torch.from_numpy(array)).detach().numpy(), atol=1e-6)
    # gradients: the torch module's autograd on the same loss
    d_out = [rng.normal(size=o.shape).astype(np.float32) for o in outputs]
    _, backprop = model.begin_update(inputs)
    d_inputs = backprop(d_out)
    tensors = [torch.from_numpy(a).requires_grad_() for a in inputs]
    loss = sum((module(t) * torch.from_numpy(d)).sum() for t, d in zip(tensors, d_out))
    loss.backward()
    assert np.allclose(model.get_grad("s"), module.scalar_parameters.grad.numpy(), atol=1e-4)
    assert np.allclose(model.get_grad("gamma"), module.gamma.grad.numpy(), atol=1e-4)
    for d, t in zip(d_inputs, tensors):
        assert d.shape == t.shape and np.allclose(d, t.grad.numpy(), atol=1e-5)


def test_no_gradient_graph_at_prediction():
    model = layers.ScalarMix_v1()
    inputs = [np.ones((3, 2, 4), dtype=np.float32)]
    model.initialize(X=inputs)
    (out,) = model.predict(inputs)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and np.allclose(out, 1.0)


@pytest.mark.parametrize("module", ["spacy_elmo.layers", "spacy_elmo.layers.listener", "spacy_elmo.layers.tok2vec",
                                    "spacy_elmo.layers.architectures", "spacy_elmo.layers.bilm_model", "spacy_elmo.pipeline.component",
                                    "spacy_elmo.roundtrip", "spacy_elmo.hub", "spacy_elmo.kernels.bf16"])
def test_each_module_imports_first(module):
    # a fresh interpreter: whichever module comes first, the layers/pipeline imports resolve
    run = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr.strip().splitlines()[-1:]


def test_registered_names_resolve_to_the_layers_package():
    for name, func in [("spacy-elmo.ScalarMix.v1", layers.ScalarMix_v1), ("spacy-elmo.ElmoListener.v1", layers.ElmoListener_v1),
                       ("spacy-elmo.ElmoTok2Vec.v1", layers.ElmoTok2Vec_v1)]:
        assert registry.architectures.get(name) is func
        assert func.__module__ == "spacy_elmo.layers.architectures"
    entry_points = (REPO / "setup.cfg").read_text()
    assert "spacy_elmo.layers.architectures:ScalarMix_v1" in entry_points
    assert "spacy_elmo.pipeline.architectures" not in entry_points  # the re-export shims are gone


def test_the_biLM_model_and_contexts_live_in_the_layers_package():
    from spacy_elmo.layers import bilm_model, contexts

    assert registry.architectures.get("spacy-elmo.BiLM.v1") is bilm_model.build_bilm_model
    assert registry.misc.get("spacy-elmo.sentence_contexts.v1") is contexts.configure_sentence_contexts
    entry_points = (REPO / "setup.cfg").read_text()
    assert "spacy_elmo.layers.bilm_model:build_bilm_model" in entry_points
    assert "spacy_elmo.layers.contexts:configure_sentence_contexts" in entry_points
    for shim in ("architectures", "bilm_model", "contexts"):  # no re-export shims left in the pipeline package
        assert not (REPO / "spacy_elmo" / "pipeline" / f"{shim}.py").exists()
