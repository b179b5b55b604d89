"""LoRA layers (Hu et al., 2021): the update equals peft's and the formula by hand, B = 0 makes the adapted layer the
Linear exactly, merging equals the unmerged layer in float64, only A and B get gradients, and bad settings are
refused naming the value."""

import re

import peft
import pytest
import torch
from torch import nn
from torch.testing import assert_close

from seqlab.errors import ConfigError
from seqlab.nn.lora import LoRALinear, add_lora, add_lora_settings, lora_layers, lora_settings, merge_lora

IN, OUT, R = 6, 5, 3


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _trained(layer: LoRALinear) -> LoRALinear:
    """Nonzero B, as after training (B = 0 at init would hide every mistake in the update)."""
    with torch.no_grad():
        layer.lora_B.normal_(0.0, 0.5)
    return layer


def test_the_update_is_the_formula_by_hand_and_peft_s():
    linear = nn.Linear(IN, OUT).double()
    layer = _trained(LoRALinear.from_linear(linear, rank=R, alpha=6.0)).eval()
    x = torch.randn(4, 2, IN, dtype=torch.float64)
    W, b, A, B = linear.weight, linear.bias, layer.lora_A, layer.lora_B
    assert_close(layer(x), x @ W.T + b + (6.0 / R) * (x @ A.T @ B.T), rtol=0, atol=1e-12)
    reference = peft.inject_adapter_in_model(
        peft.LoraConfig(r=R, lora_alpha=6.0, target_modules=["linear"]), nn.ModuleDict({"linear": linear})
    )["linear"]
    with torch.no_grad():
        reference.lora_A["default"].weight.copy_(A)
        reference.lora_B["default"].weight.copy_(B)
    assert_close(layer(x), reference(x), rtol=0, atol=1e-12)


def test_at_initialisation_the_adapted_layer_is_the_linear_exactly():
    linear = nn.Linear(IN, OUT)
    layer = LoRALinear.from_linear(linear, rank=R, alpha=16.0)
    x = torch.randn(7, IN)
    assert torch.equal(layer(x), linear(x))
    assert torch.equal(layer.lora_B, torch.zeros(OUT, R))
    assert layer.lora_A.abs().sum() > 0  # A random, B zero (Hu et al., sec. 4.1)
    assert layer.weight is linear.weight and layer.bias is linear.bias  # the same Parameters, not copies


def test_merged_equals_unmerged_in_float64():
    layer = _trained(LoRALinear(IN, OUT, rank=R, alpha=5.0, dtype=torch.float64)).eval()
    x = torch.randn(9, IN, dtype=torch.float64)
    merged = layer.merged()
    assert type(merged) is nn.Linear
    assert_close(merged(x), layer(x), rtol=0, atol=1e-6)
    assert_close(merged.weight, layer.weight + 5.0 / R * layer.lora_B @ layer.lora_A, rtol=0, atol=1e-12)


def _model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(IN, 8), nn.Tanh(), nn.Sequential(nn.Linear(8, 8), nn.Linear(8, OUT))).double()


def test_merge_lora_gives_back_the_plain_names_and_the_adapted_function():
    model = _model()
    names = list(model.state_dict())
    add_lora(model, ["0", "2.1"], rank=2, alpha=4.0)
    assert list(lora_layers(model)) == ["0", "2.1"]
    assert set(model.state_dict()) == {*names, "0.lora_A", "0.lora_B", "2.1.lora_A", "2.1.lora_B"}
    for layer in lora_layers(model).values():
        _trained(layer)
    x = torch.randn(3, IN, dtype=torch.float64)
    expected = model(x)
    assert merge_lora(model) == ["0", "2.1"]
    assert list(model.state_dict()) == names and lora_layers(model) == {}
    assert_close(model(x), expected, rtol=0, atol=1e-6)


def test_only_a_and_b_receive_gradients_when_the_linear_is_frozen():
    model = _model()
    for p in model.parameters():
        p.requires_grad_(False)
    add_lora(model, ["0", "2.0", "2.1"], rank=2, alpha=2.0)
    for layer in lora_layers(model).values():
        _trained(layer)
    model(torch.randn(4, IN, dtype=torch.float64)).square().sum().backward()
    with_grad = sorted(n for n, p in model.named_parameters() if p.grad is not None)
    assert with_grad == sorted(f"{layer}.lora_{m}" for layer in ("0", "2.0", "2.1") for m in "AB")
    assert all(p.grad.abs().sum() > 0 for p in model.parameters() if p.grad is not None)


def test_dropout_acts_on_the_adapter_input_in_training_only():
    layer = _trained(LoRALinear(IN, OUT, rank=R, alpha=3.0, dropout=0.5))
    x = torch.randn(50, IN)
    assert not torch.equal(layer.train()(x), layer.eval()(x))
    assert torch.equal(layer.eval()(x), layer.eval()(x))


def test_settings_round_trip_through_json_form():
    model = _model()
    add_lora(model, ["2.1"], rank=2, alpha=4.0, dropout=0.1)
    settings = lora_settings(model)
    assert settings == {"2.1": {"rank": 2, "alpha": 4.0, "dropout": 0.1}}
    rebuilt = _model()
    add_lora_settings(rebuilt, settings)
    assert lora_settings(rebuilt) == settings


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"rank": 0, "alpha": 1.0}, "lora_rank (0) must be an integer >= 1"),
        ({"rank": 2, "alpha": 0.0}, "lora_alpha (0.0) must be a finite number > 0"),
        ({"rank": 2, "alpha": 1.0, "dropout": 1.0}, "lora_dropout (1.0) must be in [0, 1)"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(settings, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        LoRALinear(IN, OUT, **settings)


def test_only_plain_linear_layers_can_be_adapted():
    model = _model()
    with pytest.raises(ValueError, match=r"^'1' is not an nn.Linear of the model \(Tanh\)$"):
        add_lora(model, ["1"], rank=2, alpha=2.0)
    with pytest.raises(ValueError, match=r"^'9' is not an nn.Linear of the model \(absent\)$"):
        add_lora(model, ["9"], rank=2, alpha=2.0)
    add_lora(model, ["0"], rank=2, alpha=2.0)
    with pytest.raises(ValueError, match=r"^'0' is not an nn.Linear of the model \(LoRALinear\)$"):
        add_lora(model, ["0"], rank=2, alpha=2.0)
    with pytest.raises(ValueError, match=r"must hold exactly rank, alpha and dropout"):
        add_lora_settings(_model(), {"0": {"rank": 2}})
