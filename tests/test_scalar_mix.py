import numpy as np
import pytest
import torch

from spacy_elmo import ScalarMix
from spacy_elmo.bilm.scalar_mix import apply_mix, mix_penalty, spec_weights


def layers():
    torch.manual_seed(0)
    return torch.randn(3, 2, 4, 8)


def test_average_is_the_mean():
    x = layers()
    assert torch.allclose(ScalarMix(3)(x), x.mean(0), atol=1e-6)


@pytest.mark.parametrize("spec,index", [("top", 2), ("layer:0", 0), ("layer:1", 1)])
def test_single_layer_presets_are_exact(spec, index):
    x = layers()
    assert torch.equal(ScalarMix(3, spec, trainable=False)(x), x[index])


@pytest.mark.parametrize("spec,index", [("top", 2), ("layer:0", 0), ([0, 1, 0], 1)])
def test_trainable_single_layer_presets_can_move(spec, index):
    x = layers()
    mix = ScalarMix(3, spec)  # trainable: 99% on the layer, not 100% (which no gradient can leave)
    assert mix.weights[index].item() == pytest.approx(0.99)
    mix(x).pow(2).sum().backward()
    others = [i for i in range(3) if i != index]
    assert mix.scalar_parameters.grad[others].abs().min() > 1e-4


def test_explicit_weights_and_gamma():
    x = layers()
    mix = ScalarMix(3, [1, 0, 3], gamma=2.0, trainable=False)
    assert torch.allclose(mix.weights, torch.tensor([0.25, 0.0, 0.75]))
    assert torch.allclose(mix(x), 2.0 * (0.25 * x[0] + 0.75 * x[2]), atol=1e-6)


def test_layer_norm_is_per_token():
    x = layers()
    out = ScalarMix(3, "layer:1", layer_norm=True)(x)
    assert torch.allclose(out.mean(-1), torch.zeros(2, 4), atol=1e-5)
    alone = ScalarMix(3, "layer:1", layer_norm=True)(x[:, :1, :1])
    assert torch.allclose(out[:1, :1], alone, atol=1e-6)  # independent of the rest of the batch


def test_regularization_pulls_toward_uniform_and_trains():
    mix = ScalarMix(3, "average", l2_coef=0.5)
    assert mix.regularization().item() == 0.0
    mix = ScalarMix(3, [0.2, 0.3, 0.5], l2_coef=0.5)
    penalty = mix.regularization()
    assert penalty.item() > 0
    penalty.backward()
    assert mix.scalar_parameters.grad is not None and mix.scalar_parameters.grad.abs().sum() > 0


@pytest.mark.parametrize("spec", ["bottom", "layer:3", "layer:x", [1, 2], [-1, 1, 1], [0, 0, 0]])
def test_bad_specs_name_the_problem(spec):
    with pytest.raises(ValueError, match="mix"):
        ScalarMix(3, spec)


def test_wrong_number_of_layers():
    with pytest.raises(ValueError, match="expects 3 layers"):
        ScalarMix(3)(torch.zeros(2, 1, 4))


# ---------------------------------------------------------------- the shared functions


@pytest.mark.parametrize("layer_norm", [False, True])
def test_apply_mix_gradients_pass_gradcheck(layer_norm):
    torch.manual_seed(0)
    layers = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    logits = torch.tensor([0.3, -1.0, 0.5], dtype=torch.float64, requires_grad=True)
    gamma = torch.tensor([1.3], dtype=torch.float64, requires_grad=True)

    def mixed(layers, logits, gamma):
        return apply_mix(layers, torch.softmax(logits, 0), gamma, layer_norm) + mix_penalty(logits, 0.1)

    assert torch.autograd.gradcheck(mixed, (layers, logits, gamma))


def test_apply_mix_takes_numpy_and_any_layer_axis():
    rng = np.random.default_rng(0)
    by_token = rng.normal(size=(6, 3, 4)).astype(np.float32)  # [n, L, dim], as the evaluations hold them
    weights = spec_weights([1, 2, 3], 3)
    assert np.allclose(weights, [1 / 6, 2 / 6, 3 / 6])
    out = apply_mix(by_token, weights, layer_axis=1)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (6, 4)
    assert np.allclose(out, np.einsum("nld,l->nd", by_token, weights), atol=1e-6)
    assert np.array_equal(apply_mix(by_token, spec_weights("layer:1", 3), layer_axis=1), by_token[:, 1])
    module = ScalarMix(3, [1, 2, 3], gamma=0.5, layer_norm=True, trainable=False)
    by_layer = np.ascontiguousarray(by_token.transpose(1, 0, 2))
    assert np.allclose(apply_mix(by_layer, weights, 0.5, layer_norm=True), module(torch.from_numpy(by_layer)).detach().numpy(), atol=1e-6)
    with pytest.raises(ValueError, match=r"\(2,\) weights for 3 layers"):
        apply_mix(by_layer, [0.5, 0.5])


def test_spec_mix_is_the_weighted_sum_of_the_spec_weights():
    from spacy_elmo.bilm.scalar_mix import spec_mix

    layers = np.random.default_rng(3).normal(size=(3, 5, 4)).astype(np.float32)
    for spec, weights in (("layer:1", [0, 1, 0]), ("average", [1 / 3] * 3), ([0.0, 1.0, 3.0], [0, 0.25, 0.75])):
        out = spec_mix(layers, spec)
        assert out.dtype == np.float32 and out.shape == (5, 4)
        np.testing.assert_allclose(out, np.einsum("lnd,l->nd", layers, weights), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(spec_mix(layers[:, 2], "top"), layers[2, 2], rtol=1e-6, atol=1e-6)  # one token
