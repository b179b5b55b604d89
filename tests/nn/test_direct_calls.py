"""``seqlab.nn.direct_calls``: a plain module is computed from its current parameters, anything else is called.

Also pins the private torch registries the plainness check reads (``torch.nn.modules.module._global_forward_hooks``
and ``_global_forward_pre_hooks``): a torch upgrade that moves them fails here, not silently in decoding.
"""

import torch
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
    x, ids = torch.randn(2, 3), torch.tensor([[1, 4]])
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
