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


def _projections(bias: bool = True) -> list[nn.Linear]:
    torch.manual_seed(0)
    return [nn.Linear(4, 4, bias=bias).double() for _ in range(3)]


@pytest.mark.parametrize("rows", [1, 2, direct_calls.FEW_ROWS])
@pytest.mark.parametrize("bias", [True, False])
def test_stacked_linear_equals_the_modules_outputs_side_by_side(rows, bias):
    """q, k, v stacked: at one row (4 -> 12, a widening product) from one transposed copy, at a few rows as one
    product over the stacked weights; each module's output in its place."""
    modules, x = _projections(bias), torch.randn(rows, 4, dtype=torch.float64)
    derived = direct_calls.DerivedWeights()
    y = direct_calls.stacked_linear(modules, x, derived)
    assert y.shape == (rows, 12) and y.is_contiguous()
    torch.testing.assert_close(y, torch.cat([m(x) for m in modules], dim=1), rtol=1e-12, atol=1e-12)
    assert len(derived) == 1  # the stacked weight (transposed at one row) with its stacked bias


def test_stacked_linear_gives_none_where_it_does_not_apply():
    derived, x = direct_calls.DerivedWeights(), torch.randn(1, 4, dtype=torch.float64)
    modules = _projections()
    assert direct_calls.stacked_linear(modules[:1], x, derived) is None  # 4 -> 4 does not widen
    rows = torch.randn(2, 4, dtype=torch.float64)
    assert direct_calls.stacked_linear(modules[:1], rows, derived) is None  # one product either way: affine's
    many = torch.randn(direct_calls.FEW_ROWS + 1, 4, dtype=torch.float64)
    assert direct_calls.stacked_linear(modules, many, derived) is None  # more than a few rows: F.linear's
    assert direct_calls.stacked_linear([*modules[:2], Doubled(4, 4).double()], x, derived) is None  # a subclass
    hooked = _projections()
    hooked[1].register_forward_hook(lambda module, args, output: output + 1)
    assert direct_calls.stacked_linear(hooked, x, derived) is None
    assert direct_calls.stacked_linear(hooked, rows, derived) is None
    mixed = [*_projections()[:2], _projections(bias=False)[0]]
    assert direct_calls.stacked_linear(mixed, x, derived) is None  # some with a bias, some without
    weight = torch.randn(12, 4, dtype=torch.float64)
    assert direct_calls.stacked_product(x, [weight.as_subclass(Recording)], [], derived) is None
    with torch.inference_mode():
        frozen = torch.randn(12, 4, dtype=torch.float64)  # an inference tensor tracks no version
    assert direct_calls.stacked_product(x, [frozen], [], derived) is None
    assert direct_calls.stacked_product(rows, [weight, frozen], [], derived) is None
    assert len(derived) == 0


@pytest.mark.parametrize("rows", [1, 3])
def test_derived_weights_are_rebuilt_when_a_source_changes_and_reused_otherwise(rows):
    modules, x = _projections(), torch.randn(rows, 4, dtype=torch.float64)
    derived = direct_calls.DerivedWeights()

    def check():
        y = direct_calls.stacked_linear(modules, x, derived)
        torch.testing.assert_close(y, torch.cat([m(x) for m in modules], dim=1), rtol=1e-12, atol=1e-12)

    def stacked():
        sources = (*(m.weight for m in modules), *(m.bias for m in modules))
        return derived.get(sources, lambda: None, kind=rows == 1)

    check()
    weight = stacked()
    check()
    assert stacked() is weight  # reused, not copied again
    with torch.no_grad():
        modules[1].weight.mul_(-2.0)  # in place: the version moves
    check()
    modules[2].bias.data = torch.randn(4, dtype=torch.float64)  # new storage
    check()
    modules[0].weight = nn.Parameter(torch.randn(4, 4, dtype=torch.float64))  # another tensor
    check()
    state = {name: torch.randn_like(p) for name, p in modules[2].state_dict().items()}
    modules[2].load_state_dict(state)
    check()
