import pytest
import torch
import torch.nn.functional as F

from seqlab.nn import ScalarMix


def test_equal_weights_give_gamma_times_the_mean():
    torch.manual_seed(0)
    layers = torch.randn(3, 2, 5, 4)
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.gamma.fill_(2.5)
    torch.testing.assert_close(mix(layers), 2.5 * layers.mean(0))


def test_weights_are_the_softmax_of_the_scalars():
    torch.manual_seed(0)
    layers = torch.randn(3, 2, 5, 4)
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([1.0, -2.0, 0.5]))
    s = torch.exp(torch.tensor([1.0, -2.0, 0.5]))
    s = s / s.sum()
    torch.testing.assert_close(mix(layers), s[0] * layers[0] + s[1] * layers[1] + s[2] * layers[2])


def test_layer_norm_normalises_each_layer_before_mixing():
    torch.manual_seed(0)
    layers = torch.randn(2, 3, 4, 6) * 5 + 3
    mix = ScalarMix(2, layer_norm=True)
    expected = (F.layer_norm(layers[0], (6,)) + F.layer_norm(layers[1], (6,))) / 2
    torch.testing.assert_close(mix(layers), expected)


def test_wrong_number_of_layers_is_refused():
    with pytest.raises(ValueError, match=r"must stack 3 layers at dimension 0, got shape \(2, 1, 4\)"):
        ScalarMix(3)(torch.zeros(2, 1, 4))
