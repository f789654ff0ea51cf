import pytest
import torch

from spacy_elmo import ScalarMix


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
