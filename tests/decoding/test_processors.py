import doctest

import pytest
import torch
from torch.testing import assert_close
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from seqlab.decoding import processors
from seqlab.decoding.processors import (
    logits_processor,
    min_p,
    no_repeat_ngram,
    repetition_penalty,
    temperature,
    top_k,
    top_p,
)

INF = float("inf")


def _random_logits(seed, B=6, V=11, dtype=torch.float32):
    return torch.randn(B, V, generator=torch.Generator().manual_seed(seed), dtype=dtype) * 2.0


def test_docstring_examples_run():
    assert doctest.testmod(processors, raise_on_error=True).attempted >= 7


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_top_k_keeps_exactly_k_with_ties_broken_towards_lower_ids(k):
    logits = torch.randint(0, 4, (50, 8), generator=torch.Generator().manual_seed(k)).float()  # many ties
    out = top_k(logits, k)
    assert torch.all(out.isfinite().sum(dim=1) == k)
    for row, kept in zip(logits.tolist(), out.isfinite().tolist(), strict=True):
        order = sorted(range(8), key=lambda i: (-row[i], i))  # value descending, then lower id first
        assert [i for i in range(8) if kept[i]] == sorted(order[:k])
    assert torch.equal(out[out.isfinite()], logits[out.isfinite()])


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.75, 0.9, 0.999, 1.0])
def test_top_p_keeps_the_smallest_prefix_of_sorted_probabilities_that_reaches_p(p):
    logits = _random_logits(1, B=40, V=9, dtype=torch.float64)
    out = top_p(logits, p)
    for row, kept in zip(torch.softmax(logits, -1).tolist(), out.isfinite().tolist(), strict=True):
        order = sorted(range(9), key=lambda i: -row[i])
        m, mass = 0, 0.0
        while mass < p and m < 9:  # brute force: add tokens by probability until the mass reaches p
            mass, m = mass + row[order[m]], m + 1
        assert [i for i in range(9) if kept[i]] == sorted(order[:m])


def test_min_p_keeps_tokens_above_a_fraction_of_the_top_probability():
    logits = _random_logits(2, B=30, dtype=torch.float64)
    probs = torch.softmax(logits, -1)
    for p in [0.0, 0.1, 0.5, 1.0]:
        expected = torch.where(probs >= p * probs.max(dim=-1, keepdim=True).values, logits, -INF)
        assert torch.equal(min_p(logits, p), expected)


def test_temperature_divides():
    logits = _random_logits(3)
    assert torch.equal(temperature(logits, 0.25), logits * 4)


def test_repetition_penalty_by_hand_and_padding_is_not_penalised():
    logits = torch.tensor([[2.0, -1.0, 3.0, -4.0, 0.5], [1.0, 1.0, 1.0, 1.0, 1.0]])
    tokens = torch.tensor([[0, 1, 0, 1], [4, 4, 2, 2]])
    keep = torch.tensor([[True] * 4, [False, False, True, True]])  # row 1: two pads with id 4
    out = repetition_penalty(logits, tokens, 2.0, keep)
    assert torch.equal(out, torch.tensor([[1.0, -2.0, 3.0, -4.0, 0.5], [1.0, 1.0, 0.5, 1.0, 1.0]]))
    assert torch.equal(repetition_penalty(logits, tokens, 2.0)[1], torch.tensor([1.0, 1.0, 0.5, 1.0, 0.5]))


def test_no_repeat_ngram_by_hand():
    logits = torch.zeros(3, 5)
    tokens = torch.tensor([[1, 2, 3, 1, 2], [0, 0, 0, 0, 4], [4, 3, 1, 2, 1]])
    keep = torch.tensor([[True] * 5, [False, False, True, True, True], [True] * 5])
    out = no_repeat_ngram(logits, tokens, 3, keep)
    # Row 0 ends in (1, 2), followed once by 3. Row 1's (0, 0, 4) touches padding: the real 0-gram (0, 0) ends in
    # (0, 4), never seen before. Row 2 ends in (2, 1): never seen before.
    assert out.isinf().nonzero().tolist() == [[0, 3]]
    assert no_repeat_ngram(logits, tokens, 1, keep).isinf().nonzero().tolist() == [
        [0, 1], [0, 2], [0, 3], [1, 0], [1, 4], [2, 1], [2, 2], [2, 3], [2, 4]
    ]  # fmt: skip
    assert torch.equal(no_repeat_ngram(logits, tokens[:, :2], 3), logits)  # shorter than n: nothing to ban


def test_top_p_keeps_the_token_whose_mass_reaches_p_exactly():
    # Uniform over 4: the first two tokens' mass is exactly 0.5 (a sum of powers of two), so p = 0.5 keeps two, as
    # transformers' TopPLogitsWarper does (its ties fall the other way); keeping while the mass is <= p would keep
    # three.
    logits = torch.zeros(1, 4)
    assert top_p(logits, 0.5).isfinite().tolist() == [[True, True, False, False]]
    assert int(TopPLogitsWarper(0.5)(None, logits.clone()).isfinite().sum()) == 2


def test_no_repeat_ngram_at_a_row_exactly_n_long_and_next_to_left_padding():
    logits = torch.zeros(1, 3)
    # [1, 1] holds the 2-gram (1, 1) and ends in 1: 1 is banned, though the row is no longer than n.
    assert no_repeat_ngram(logits, torch.tensor([[1, 1]]), 2).isinf().nonzero().tolist() == [[0, 1]]
    # [pad 0, 5, 0]: the only earlier 2-gram (0, 5) starts on padding, so nothing is banned after the real 0.
    logits = torch.zeros(1, 6)
    out = no_repeat_ngram(logits, torch.tensor([[0, 5, 0]]), 2, torch.tensor([[False, True, True]]))
    assert torch.equal(out, logits)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equal_to_transformers_processors_on_random_logits(seed):
    logits = _random_logits(seed, B=8, V=13)
    ids = torch.randint(0, 4, (8, 12), generator=torch.Generator().manual_seed(seed))  # repeats n-grams
    pairs = [
        (temperature(logits, 0.7), TemperatureLogitsWarper(0.7)),
        (top_k(logits, 4), TopKLogitsWarper(4)),
        (top_p(logits, 0.8), TopPLogitsWarper(0.8)),
        (top_p(logits, 0.2), TopPLogitsWarper(0.2)),
        (min_p(logits, 0.3), MinPLogitsWarper(0.3)),
        (repetition_penalty(logits, ids, 1.3), RepetitionPenaltyLogitsProcessor(1.3)),
        (repetition_penalty(logits, ids, 0.6), RepetitionPenaltyLogitsProcessor(0.6)),
        (no_repeat_ngram(logits, ids, 2), NoRepeatNGramLogitsProcessor(2)),
        (no_repeat_ngram(logits, ids, 3), NoRepeatNGramLogitsProcessor(3)),
    ]
    for ours, theirs in pairs:
        assert_close(ours, theirs(ids, logits.clone()), rtol=0, atol=0)


def test_chain_equals_transformers_in_generate_order():
    logits = _random_logits(5, B=8, V=13)
    ids = torch.randint(0, 4, (8, 12), generator=torch.Generator().manual_seed(5))
    settings = {"temperature": 0.8, "top_k": 6, "top_p": 0.9, "min_p": 0.05}
    process = logits_processor(do_sample=True, repetition_penalty=1.2, no_repeat_ngram_size=2, **settings)
    theirs = LogitsProcessorList([
        RepetitionPenaltyLogitsProcessor(1.2),
        NoRepeatNGramLogitsProcessor(2),
        TemperatureLogitsWarper(0.8),
        TopKLogitsWarper(6),
        TopPLogitsWarper(0.9),
        MinPLogitsWarper(0.05),
    ])  # fmt: skip
    assert_close(process(logits, ids, None), theirs(ids, logits.clone()), rtol=0, atol=0)
    # Without sampling only the penalties apply.
    greedy = logits_processor(repetition_penalty=1.2, no_repeat_ngram_size=2)
    assert_close(greedy(logits, ids, None), LogitsProcessorList(theirs[:2])(ids, logits.clone()), rtol=0, atol=0)


def test_masked_tokens_get_minus_inf_and_dtype_is_kept():
    logits = _random_logits(6, dtype=torch.float64)
    for out in [top_k(logits, 2), top_p(logits, 0.3), min_p(logits, 0.5)]:
        assert out.dtype == torch.float64
        assert torch.all(out.isfinite() | (out == -INF))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x: temperature(x, 0.0), r"temperature \(0\.0\) must be a finite number > 0\.0"),
        (lambda x: temperature(x, -1), r"temperature \(-1\) must be a finite number > 0\.0"),
        (lambda x: top_k(x, 0), r"top_k \(0\) must be an integer >= 1"),
        (lambda x: top_p(x, 0.0), r"top_p \(0\.0\) must be a finite number > 0\.0 and <= 1\.0"),
        (lambda x: top_p(x, 1.5), r"top_p \(1\.5\) must be a finite number > 0\.0 and <= 1\.0"),
        (lambda x: min_p(x, 1.5), r"min_p \(1\.5\) must be a finite number >= 0\.0 and <= 1\.0"),
        (lambda x: repetition_penalty(x, x.long(), 0.0), r"repetition_penalty \(0\.0\) must be a finite number > 0\.0"),
        (lambda x: no_repeat_ngram(x, x.long(), 0), r"no_repeat_ngram_size \(0\) must be an integer >= 1"),
        (lambda x: logits_processor(top_k=5), r"top_k \(5\) applies only with do_sample=True"),
        (lambda x: logits_processor(temperature=0.5), r"temperature \(0\.5\) applies only with do_sample=True"),
        (lambda x: logits_processor(no_repeat_ngram_size=-1), r"no_repeat_ngram_size \(-1\) must be an integer >= 0"),
    ],
)
def test_errors(call, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        call(torch.zeros(2, 3))
