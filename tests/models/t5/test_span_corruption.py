"""Span corruption: inputs + targets give back the original exactly; the noise share and the mean span length
match T5's settings over many draws; a fixed generator reproduces the draw."""

import pytest
import torch

from seqlab.errors import ConfigError
from seqlab.models.t5.span_corruption import random_spans_noise_mask, sentinel_tokens, span_corruption

SENTINELS = list(range(1000, 1100))


def reconstruct(inputs, targets):
    """Replace each sentinel of the inputs by what follows it in the targets, up to the next sentinel."""
    spans, current = {}, None
    for token in targets:
        if token in SENTINELS:
            current = token
            spans[current] = []
        else:
            spans[current].append(token)
    out = []
    for token in inputs:
        out.extend(spans[token] if token in SENTINELS else [token])
    return out


@pytest.mark.parametrize("length", [2, 3, 7, 20, 101, 512])
def test_inputs_and_targets_reconstruct_the_original(length):
    g = torch.Generator().manual_seed(length)
    for _ in range(50):
        tokens = torch.randint(0, 1000, (length,), generator=g).tolist()
        inputs, targets = span_corruption(tokens, SENTINELS, generator=g)
        assert reconstruct(inputs, targets) == tokens
        spans = sum(t in SENTINELS for t in inputs)
        assert spans >= 1 and [t for t in targets if t in SENTINELS] == SENTINELS[: spans + 1]
        assert [t for t in inputs if t in SENTINELS] == SENTINELS[:spans]


def test_noise_share_and_mean_span_length_over_many_draws():
    g = torch.Generator().manual_seed(0)
    noise = spans = tokens = 0
    for _ in range(2000):
        length = int(torch.randint(20, 200, (1,), generator=g))
        mask = random_spans_noise_mask(length, generator=g)
        noise += int(mask.sum())
        spans += int((mask[1:] & ~mask[:-1]).sum() + mask[0])
        tokens += length
    assert noise / tokens == pytest.approx(0.15, abs=0.005)
    assert noise / spans == pytest.approx(3.0, abs=0.1)


def test_span_lengths_are_spread_not_fixed():
    g = torch.Generator().manual_seed(1)
    lengths = []
    for _ in range(200):
        mask = random_spans_noise_mask(100, generator=g).long()
        edges = torch.diff(torch.cat([torch.tensor([0]), mask, torch.tensor([0])]))
        lengths += (torch.nonzero(edges == -1).flatten() - torch.nonzero(edges == 1).flatten()).tolist()
    assert min(lengths) == 1 and max(lengths) >= 8


def test_a_fixed_generator_reproduces_the_draw():
    tokens = list(range(60))
    first = span_corruption(tokens, SENTINELS, generator=torch.Generator().manual_seed(7))
    again = span_corruption(tokens, SENTINELS, generator=torch.Generator().manual_seed(7))
    other = span_corruption(tokens, SENTINELS, generator=torch.Generator().manual_seed(8))
    assert first == again and first != other


def test_bad_settings_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"^noise_density \(1\.5\) must be a finite number > 0\.0 and < 1\.0$"):
        random_spans_noise_mask(10, noise_density=1.5)
    with pytest.raises(ConfigError, match=r"^length \(1\) must be an integer >= 2$"):
        span_corruption([5], SENTINELS)
    with pytest.raises(ConfigError, match=r"^len\(sentinel_ids\) \(1\) must be an integer >= \d+$"):
        span_corruption(list(range(100)), [1000])


def test_sentinel_names_follow_t5():
    assert sentinel_tokens(3) == ["<extra_id_0>", "<extra_id_1>", "<extra_id_2>"]
