"""``seqlab.nn.direct_calls``: a plain module is computed from its current parameters, anything else is called.

Also pins the private torch registries the plainness check reads (``torch.nn.modules.module._global_forward_hooks``
and ``_global_forward_pre_hooks``): a torch upgrade that moves them fails here, not silently in decoding.
"""

from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as torch_module

from seqlab.nn import direct_calls


def test_the_global_hook_registries_exist_and_fill_when_a_global_hook_is_registered():
    assert isinstance(torch_module._global_forward_hooks, dict)
    assert isinstance(torch_module._global_forward_pre_hooks, dict)
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, output: None)
    try:
        assert torch_module._global_forward_hooks
        assert not direct_calls.is_plain(nn.Linear(2, 2), nn.Linear)
    finally:
        handle.remove()
    assert direct_calls.is_plain(nn.Linear(2, 2), nn.Linear)


def test_plain_modules_equal_their_call_and_read_weights_changed_in_place():
    torch.manual_seed(0)
    linear, norm, embedding = nn.Linear(3, 4), nn.LayerNorm(4), nn.Embedding(5, 4)
    x, ids = torch.randn(1, 3), torch.tensor([[1, 4]])  # one row: F.linear's own product (see the next test)
    torch.testing.assert_close(direct_calls.linear(linear, x), linear(x), rtol=0, atol=0)
    torch.testing.assert_close(direct_calls.layer_norm(norm, linear(x)), norm(linear(x)), rtol=0, atol=0)
    torch.testing.assert_close(direct_calls.embedding(embedding, ids), embedding(ids), rtol=0, atol=0)
    with torch.no_grad():
        linear.weight.mul_(2.0)
    torch.testing.assert_close(direct_calls.linear(linear, x), linear(x), rtol=0, atol=0)


class Doubled(nn.Linear):
    def forward(self, x):
        return 2 * super().forward(x)


def test_a_subclass_a_hook_or_an_instance_forward_is_called_as_the_module():
    torch.manual_seed(0)
    x = torch.randn(2, 3)
    doubled = Doubled(3, 4)
    torch.testing.assert_close(direct_calls.linear(doubled, x), doubled(x))
    hooked = nn.Linear(3, 4)
    hooked.register_forward_hook(lambda module, args, output: output + 1)
    torch.testing.assert_close(direct_calls.linear(hooked, x), hooked(x))
    patched = nn.Linear(3, 4)
    patched.forward = lambda x: torch.zeros(2, 4)
    torch.testing.assert_close(direct_calls.linear(patched, x), torch.zeros(2, 4))


@pytest.mark.parametrize("rows", [1, 2, 5, direct_calls.FEW_ROWS, direct_calls.FEW_ROWS + 1, 40])
@pytest.mark.parametrize("bias", [True, False])
def test_affine_equals_f_linear_for_any_number_of_rows(rows, bias):
    """Few rows take the other orientation, (W x^T)^T: the same sums, so equal to rounding, in x's shape."""
    torch.manual_seed(0)
    weight, b = torch.randn(6, 5, dtype=torch.float64), torch.randn(6, dtype=torch.float64) if bias else None
    x = torch.randn(rows, 1, 5, dtype=torch.float64)
    y = direct_calls.affine(x, weight, b)
    assert y.shape == (rows, 1, 6) and y.is_contiguous()
    torch.testing.assert_close(y, F.linear(x, weight, b), rtol=1e-12, atol=1e-12)
    linear = nn.Linear(5, 6, bias=bias)
    x = x.float()
    torch.testing.assert_close(direct_calls.linear(linear, x, few=direct_calls.few_rows(x)), linear(x))
    assert direct_calls.few_rows(x) == (1 < rows <= direct_calls.FEW_ROWS)


class Recording(torch.Tensor):
    """A weight of a tensor subclass, which sees the torch functions called on it."""

    calls: ClassVar[list] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


def test_affine_leaves_a_tensor_subclass_weight_to_f_linear():
    torch.manual_seed(0)
    weight = torch.randn(4, 3).as_subclass(Recording)
    Recording.calls.clear()
    direct_calls.affine(torch.randn(3, 3), weight)
    assert Recording.calls[0] is F.linear
