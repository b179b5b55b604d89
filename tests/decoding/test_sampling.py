import pytest
import torch

from seqlab.decoding import logits_processor, sample

LOGITS = torch.tensor([[2.0, 1.5, 0.7, 0.0, -0.5, -3.0]])


def test_same_generator_seed_gives_the_same_tokens():
    logits = torch.randn(64, 10, generator=torch.Generator().manual_seed(0))

    def draw(seed):
        return sample(logits, temperature=0.9, top_k=5, top_p=0.9, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(draw(1), draw(1))
    assert not torch.equal(draw(1), draw(2))


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"temperature": 0.5},
        {"top_k": 3},
        {"top_p": 0.8},
        {"min_p": 0.2},
        {"temperature": 1.5, "top_k": 4, "top_p": 0.9},
    ],
)
def test_empirical_distribution_matches_the_processed_probabilities(settings):
    n = 20_000
    tokens = sample(LOGITS.expand(n, -1), generator=torch.Generator().manual_seed(3), **settings)
    frequencies = torch.bincount(tokens, minlength=6).double() / n
    warped = logits_processor(do_sample=True, **settings)(LOGITS, torch.zeros(1, 0, dtype=torch.long), None)
    probs = torch.softmax(warped.double(), dim=-1)[0]
    assert (frequencies - probs).abs().max() < 0.02
    assert torch.all(frequencies[probs == 0] == 0)  # masked tokens are never drawn


def test_temperature_towards_zero_is_greedy():
    logits = torch.randn(200, 7, generator=torch.Generator().manual_seed(4))
    tokens = sample(logits, temperature=1e-4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(tokens, logits.argmax(dim=-1))


def test_errors():
    with pytest.raises(ValueError, match=r"^temperature \(0\.0\) must be a finite number > 0\.0$"):
        sample(LOGITS, temperature=0.0)
    with pytest.raises(ValueError, match=r"^top_k \(0\) must be None or an integer >= 1$"):
        sample(LOGITS, top_k=0)
    with pytest.raises(ValueError, match=r"^top_p \(1\.5\) must be None or a finite number > 0\.0 and <= 1\.0$"):
        sample(LOGITS, top_p=1.5)
    with pytest.raises(ValueError, match=r"^min_p \(-0\.1\) must be None or a finite number >= 0\.0 and <= 1\.0$"):
        sample(LOGITS, min_p=-0.1)
