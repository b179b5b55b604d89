"""BERT's masking: the 80/10/10 statistics on 10k tokens, never a special or padding token, reproducible with a
generator; the loss scores exactly the selected positions (against cross_entropy over all positions with
ignore_index)."""

import pytest
import torch
import torch.nn.functional as F

from seqlab.models import BertConfig, BertForMaskedLM
from seqlab.training.masked_lm import IGNORE_INDEX, mask_tokens, masked_lm_loss

V, MASK, PAD, CLS, SEP = 1000, 4, 0, 2, 3


def batch(B=50, T=300, seed=0):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, V, (B, T), generator=generator)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=generator)
    keep_mask = torch.arange(T)[None, :] < lengths[:, None]
    input_ids[:, 0] = CLS
    input_ids[torch.arange(B), lengths - 1] = SEP
    input_ids = input_ids.masked_fill(~keep_mask, PAD)
    maskable = keep_mask & (input_ids > SEP)
    return input_ids, maskable


def test_the_80_10_10_rule_holds_within_tolerance():
    input_ids, maskable = batch()
    n = int(maskable.sum())
    assert n > 10_000
    out = mask_tokens(input_ids, maskable, mask_id=MASK, vocab_size=V, generator=torch.Generator().manual_seed(1))
    selected = out.labels != IGNORE_INDEX
    m = int(selected.sum())
    # binomial standard deviations: selection sqrt(n 0.15 0.85) / n ~ 0.35 points, each 10% share of the M ~ 1700
    # selected ~ 0.7 points, the 80% share ~ 1 point: every tolerance is about 3 sigma or more
    assert abs(m / n - 0.15) < 0.015
    became_mask = (out.input_ids == MASK) & selected
    unchanged = (out.input_ids == input_ids) & selected
    random = selected & ~became_mask & ~unchanged
    assert abs(int(became_mask.sum()) / m - 0.8) < 0.03
    # a random draw can hit the original token (1/V), counted as unchanged here
    assert abs(int(unchanged.sum()) / m - 0.1) < 0.025
    assert abs(int(random.sum()) / m - 0.1) < 0.025
    assert torch.equal(out.labels[selected], input_ids[selected])
    assert torch.equal(out.input_ids[~selected], input_ids[~selected])


def test_random_replacements_cover_every_id_about_one_in_v():
    # Half the tokens are 0, half 1, so a replacement is told apart from its token everywhere except on that
    # token: id j is counted over the half whose token is not j. Each count is Binomial(N, q / V) with N = 100k,
    # q = P(selected and replaced at random) = 0.99 * 0.99: mean ~ 9801, sd ~ 94; the 10% bound is ~ 10 sd, so
    # with the fixed seed it holds, and it would hold for any seed with probability > 1 - 1e-20. An id left out
    # of the draw (randint from 1, or to V - 1) counts 0 and a range of V + 1 ids ~ 8900: both fail.
    V, N = 10, 100_000
    input_ids = torch.arange(2).repeat_interleave(N).view(2, N)  # row 0: all 0, row 1: all 1
    out = mask_tokens(
        input_ids,
        torch.ones_like(input_ids, dtype=torch.bool),
        mask_id=MASK,
        vocab_size=V,
        generator=torch.Generator().manual_seed(0),
        mask_prob=0.99,
        replace_prob=0.0,
        random_prob=0.99,
    )
    counts = [int((out.input_ids[0 if j != 0 else 1] == j).sum()) for j in range(V)]
    expected = N * 0.99 * 0.99 / V
    assert all(abs(c - expected) < 0.1 * expected for c in counts), counts
    assert out.input_ids.max() < V


def test_special_and_padding_tokens_are_never_selected():
    input_ids, maskable = batch(B=8, T=64)
    for seed in range(20):
        generator = torch.Generator().manual_seed(seed)
        out = mask_tokens(input_ids, maskable, mask_id=MASK, vocab_size=V, generator=generator)
        assert not (out.labels != IGNORE_INDEX)[~maskable].any()
        assert torch.equal(out.input_ids[~maskable], input_ids[~maskable])


def test_the_same_generator_seed_gives_the_same_masks():
    input_ids, maskable = batch(B=4, T=32)
    a, b = (
        mask_tokens(input_ids, maskable, mask_id=MASK, vocab_size=V, generator=torch.Generator().manual_seed(7))
        for _ in range(2)
    )
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.labels, b.labels)


def test_bad_arguments_are_refused():
    input_ids, maskable = batch(B=2, T=8)
    with pytest.raises(ValueError, match=r"mask_prob \(1.5\) must be in \[0, 1\)"):
        mask_tokens(input_ids, maskable, mask_id=MASK, vocab_size=V, mask_prob=1.5)
    with pytest.raises(ValueError, match=r"mask_id \(1000\) must be in \[0, 1000\)"):
        mask_tokens(input_ids, maskable, mask_id=V, vocab_size=V)
    with pytest.raises(ValueError, match="maskable must be bool"):
        mask_tokens(input_ids, maskable.long(), mask_id=MASK, vocab_size=V)


def test_the_loss_scores_exactly_the_selected_positions():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=V, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_positions=64, dropout=0.0)
    model = BertForMaskedLM(config).eval()
    input_ids, maskable = batch(B=3, T=20)
    keep_mask = input_ids != PAD
    masked = mask_tokens(input_ids, maskable, mask_id=MASK, vocab_size=V, generator=torch.Generator().manual_seed(3))
    result = masked_lm_loss(model, masked, keep_mask=keep_mask)
    logits = model(masked.input_ids, keep_mask=keep_mask).logits
    expected = F.cross_entropy(logits.flatten(0, 1), masked.labels.flatten(), ignore_index=IGNORE_INDEX)
    torch.testing.assert_close(result.output.loss, expected)
    selected = masked.labels != IGNORE_INDEX
    assert result.output.num_tokens == int(selected.sum())
    assert result.correct == int((logits.argmax(-1) == masked.labels)[selected].sum())
