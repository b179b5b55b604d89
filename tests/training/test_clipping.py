import math
import re

import pytest
import torch
from torch import nn

from seqlab.training.clipping import clip_grad_norm, clip_grad_value, grad_norm


def model_with_grads(scale=1.0, seed=0):
    """A tiny float64 model with gradients of norm about `scale`, plus one parameter without a gradient."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    x = torch.randn(5, 3, dtype=torch.float64)
    model(x).square().sum().backward()
    with torch.no_grad():
        norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
        for p in model.parameters():
            p.grad.mul_(scale / norm)
    unused = nn.Parameter(torch.ones(2, dtype=torch.float64))  # grad is None: must be skipped
    return [*model.parameters(), unused]


def copy_with_grads(params):
    copies = []
    for p in params:
        q = nn.Parameter(p.detach().clone())
        q.grad = None if p.grad is None else p.grad.clone()
        copies.append(q)
    return copies


def grads_of(params):
    return [p.grad.clone() for p in params if p.grad is not None]


def flat_norm(grads):
    return torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))


def test_grad_norm_is_the_l2_norm_of_all_gradients_concatenated():
    params = model_with_grads(scale=3.7)
    torch.testing.assert_close(grad_norm(params), flat_norm(grads_of(params)))
    torch.testing.assert_close(grad_norm(params), torch.tensor(3.7, dtype=torch.float64))
    torch.testing.assert_close(grad_norm(iter(params)), grad_norm(params))  # a generator works too


def test_grad_norm_of_a_single_tensor_and_of_no_gradients():
    p = nn.Parameter(torch.tensor([3.0, 4.0]))
    p.grad = torch.tensor([3.0, -4.0])
    assert grad_norm(p).item() == 5.0
    assert grad_norm([nn.Parameter(torch.ones(2))]).item() == 0.0


@pytest.mark.parametrize("max_norm", [0.5, 2.0])
def test_clip_grad_norm_scales_by_min_one_tau_over_norm(max_norm):
    params = model_with_grads(scale=1.3)
    before = grads_of(params)
    norm = flat_norm(before)
    returned = clip_grad_norm(params, max_norm)
    torch.testing.assert_close(returned, norm)  # the pre-clip norm
    factor = min(1.0, max_norm / norm.item())
    for got, g in zip(grads_of(params), before, strict=True):
        torch.testing.assert_close(got, g * factor)
    after = flat_norm(grads_of(params))
    assert after.item() <= max_norm * (1 + 1e-12)
    if max_norm < 1.3:
        torch.testing.assert_close(after, torch.tensor(max_norm, dtype=torch.float64))
    else:  # below the threshold the gradient is untouched, bit for bit
        for got, g in zip(grads_of(params), before, strict=True):
            torch.testing.assert_close(got, g, rtol=0, atol=0)


def test_clip_grad_norm_matches_torch_up_to_its_epsilon():
    params = model_with_grads(scale=5.0)
    reference = copy_with_grads(params)
    ours = clip_grad_norm(params, 1.0)
    theirs = nn.utils.clip_grad_norm_(reference, 1.0)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    # torch scales by tau / (||g|| + 1e-6), ours by tau / ||g||: the ratio is exactly (||g|| + 1e-6) / ||g||.
    ratio = (ours + 1e-6) / ours
    for got, want in zip(grads_of(params), grads_of(reference), strict=True):
        torch.testing.assert_close(got, want * ratio, rtol=1e-14, atol=0)
        assert not torch.equal(got, want)


def test_clip_grad_norm_with_infinite_max_norm_only_measures():
    params = model_with_grads(scale=1e6)
    before = grads_of(params)
    torch.testing.assert_close(clip_grad_norm(params, math.inf), torch.tensor(1e6, dtype=torch.float64))
    for got, g in zip(grads_of(params), before, strict=True):
        assert torch.equal(got, g)


def test_clip_grad_norm_of_zero_gradients_leaves_them_zero():
    p = nn.Parameter(torch.ones(3))
    p.grad = torch.zeros(3)
    assert clip_grad_norm(p, 1.0).item() == 0.0
    assert torch.equal(p.grad, torch.zeros(3))


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_non_finite_norm_is_returned_and_gradients_are_left_untouched(bad):
    a, b = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))
    a.grad, b.grad = torch.tensor([bad, 1.0]), torch.tensor([2.0, 3.0])
    norm = clip_grad_norm([a, b], 1.0)
    assert not math.isfinite(norm.item())
    torch.testing.assert_close(b.grad, torch.tensor([2.0, 3.0]), rtol=0, atol=0)
    torch.testing.assert_close(a.grad, torch.tensor([bad, 1.0]), rtol=0, atol=0, equal_nan=True)


def test_clip_grad_value_clamps_each_entry_and_returns_the_pre_clip_norm():
    params = model_with_grads(scale=2.0)
    before = grads_of(params)
    reference = copy_with_grads(params)
    returned = clip_grad_value(params, 0.1)
    torch.testing.assert_close(returned, flat_norm(before))
    after = grads_of(params)
    for got, g in zip(after, before, strict=True):
        torch.testing.assert_close(got, g.clamp(-0.1, 0.1), rtol=0, atol=0)
        assert bool((got.abs() <= 0.1).all())
    assert any(bool((g.abs() > 0.1).any()) for g in before)  # so clamping was active
    assert any(bool(((g.abs() < 0.1) & (g != 0)).any()) for g in before)  # and small entries survive
    nn.utils.clip_grad_value_(reference, 0.1)
    for got, want in zip(after, grads_of(reference), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("fn", "name", "value"),
    [
        (clip_grad_norm, "max_norm", 0.0),
        (clip_grad_norm, "max_norm", -1.0),
        (clip_grad_norm, "max_norm", math.nan),
        (clip_grad_value, "clip_value", 0),
        (clip_grad_value, "clip_value", -0.5),
    ],
)
def test_non_positive_thresholds_are_rejected(fn, name, value):
    with pytest.raises(ValueError, match=f"^{re.escape(f'{name} ({value!r}) must be > 0')}$"):
        fn(model_with_grads(), value)
