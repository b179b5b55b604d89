import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from seqlab.models import GPT, GPTConfig, LanguageModelOutput, RNNLanguageModel, RNNLanguageModelConfig
from seqlab.training.language_modeling import (
    language_model_loss,
    perplexity_of_stream,
    perplexity_sliding_window,
)
from seqlab.training.objectives import LossOutput

V = 7


class CumulativeMeanLM(nn.Module):
    """A stand-in fixed-context causal model: logits_t = W mean(E[x_0..x_t]) + b, no state (like a GPT window)."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(V, 4)
        self.output = nn.Linear(4, V)

    def forward(self, input_ids, state=None, *, keep_mask=None):
        counts = torch.arange(1, input_ids.shape[1] + 1, dtype=torch.float64).unsqueeze(1)  # (T, 1)
        context = self.embedding(input_ids).cumsum(1) / counts  # (B, T, 4)
        return LanguageModelOutput(self.output(context), None)


def rnn_lm(seed=0, **overrides):
    torch.manual_seed(seed)
    options = {"vocab_size": V, "embedding_size": 4, "hidden_size": 5, "num_layers": 2, **overrides}
    return RNNLanguageModel(RNNLanguageModelConfig(**options)).double().eval()


def causal_lm(seed=0):
    torch.manual_seed(seed)
    return CumulativeMeanLM().double().eval()


def file_of(n, seed=1):
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed))


def log_prob(model, context, token):
    """log p(token | context) from one forward over the context alone."""
    return float(F.log_softmax(model(context.unsqueeze(0)).logits[0, -1], -1)[token])


@pytest.mark.parametrize("make", [rnn_lm, causal_lm])
def test_a_uniform_model_has_perplexity_equal_to_the_vocabulary_size(make):
    model = make()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    token_ids = file_of(40)
    for result in (
        perplexity_of_stream(model, token_ids, batch_size=2, bptt_len=6, num_characters=38),
        perplexity_sliding_window(model, token_ids, context_length=8, stride=3, num_characters=39),
    ):
        assert result.perplexity == pytest.approx(V)
        assert result.loss == pytest.approx(math.log(V))
        # one character per scored token: bits per character = log2 V
        assert result.bits_per_character == pytest.approx(math.log2(V))
    assert perplexity_of_stream(model, token_ids, batch_size=2, bptt_len=6).bits_per_character is None


@pytest.mark.parametrize("batch_size", [1, 3])
def test_perplexity_of_stream_equals_a_token_by_token_loop_over_each_stream(batch_size):
    model = rnn_lm()
    token_ids = file_of(29)
    result = perplexity_of_stream(model, token_ids, batch_size=batch_size, bptt_len=4)
    streams = token_ids[: batch_size * (29 // batch_size)].view(batch_size, -1)
    total, count = 0.0, 0
    with torch.no_grad():
        for stream in streams:
            state = None
            for t in range(len(stream) - 1):
                logits, state = model.step(stream[t : t + 1], state)
                total -= float(F.log_softmax(logits[0], -1)[stream[t + 1]])
                count += 1
    assert result.tokens == count == batch_size * (29 // batch_size - 1)
    assert result.loss == pytest.approx(total / count, rel=1e-12)
    assert result.perplexity == pytest.approx(math.exp(total / count), rel=1e-12)


def test_perplexity_of_stream_does_not_depend_on_the_window_length_and_restores_train_mode():
    model = rnn_lm(dropout=0.3).train()
    token_ids = file_of(50)
    results = [perplexity_of_stream(model, token_ids, batch_size=2, bptt_len=k).loss for k in (1, 5, 100)]
    assert results == pytest.approx([results[0]] * 3, rel=1e-12)
    assert model.training


@pytest.mark.parametrize("make", [rnn_lm, causal_lm])
def test_sliding_window_with_stride_equal_to_the_context_scores_disjoint_chunks(make):
    model = make()
    token_ids = file_of(23)
    result = perplexity_sliding_window(model, token_ids, context_length=5, stride=5)
    total, count = 0.0, 0
    with torch.no_grad():
        for chunk in token_ids.split(5):
            for t in range(1, len(chunk)):
                total -= log_prob(model, chunk[:t], chunk[t])
                count += 1
    assert result.tokens == count == 23 - 5  # the first token of each of the 5 chunks has no context
    assert result.loss == pytest.approx(total / count, rel=1e-12)


@pytest.mark.parametrize("make", [rnn_lm, causal_lm])
def test_sliding_window_with_stride_one_scores_every_token_with_its_full_context(make):
    model = make()
    token_ids = file_of(15)
    context_length = 4
    result = perplexity_sliding_window(model, token_ids, context_length=context_length, stride=1)
    with torch.no_grad():
        losses = [-log_prob(model, token_ids[max(0, t - context_length + 1) : t], token_ids[t]) for t in range(1, 15)]
    assert result.tokens == 14
    assert result.loss == pytest.approx(sum(losses) / 14, rel=1e-12)


def test_sliding_window_scores_every_token_once_with_at_least_context_minus_stride_tokens_before_it():
    model = causal_lm()
    token_ids = file_of(20)
    context_length, stride = 6, 4
    result = perplexity_sliding_window(model, token_ids, context_length=context_length, stride=stride)
    # Hugging Face's schedule by hand: windows [0, 6) [4, 10) [8, 14) [12, 18) [16, 20); new targets
    # 1..5, 6..9, 10..13, 14..17, 18..19, each with its window's tokens before it as context.
    windows = [(0, 6, 1), (4, 10, 6), (8, 14, 10), (12, 18, 14), (16, 20, 18)]
    with torch.no_grad():
        losses = [
            -log_prob(model, token_ids[begin:t], token_ids[t])
            for begin, end, first in windows
            for t in range(first, end)
        ]
    assert result.tokens == len(losses) == 19
    assert result.loss == pytest.approx(sum(losses) / 19, rel=1e-12)


def tiny_gpt(seed=0):
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=V, context_length=6, d_model=8, num_heads=2, num_layers=2)
    return GPT(config).double().eval()


@pytest.mark.parametrize("batch_size", [None, 1, 2, 4])
def test_sliding_window_over_batched_windows_of_a_gpt_equals_the_hand_written_schedule(batch_size):
    model = tiny_gpt()
    token_ids = file_of(23)
    result = perplexity_sliding_window(model, token_ids, context_length=6, stride=4, batch_size=batch_size)
    # Windows [0, 6) [4, 10) [8, 14) [12, 18) [16, 22) and the tail [20, 23), new targets 1..5, 6..9, 10..13,
    # 14..17, 18..21 and 22, each with its window's tokens before it as context.
    windows = [(0, 6, 1), (4, 10, 6), (8, 14, 10), (12, 18, 14), (16, 22, 18), (20, 23, 22)]
    with torch.no_grad():
        losses = [
            -log_prob(model, token_ids[begin:t], token_ids[t])
            for begin, end, first in windows
            for t in range(first, end)
        ]
    assert result.tokens == len(losses) == 22
    assert result.loss == pytest.approx(sum(losses) / 22, abs=1e-6)


@pytest.mark.parametrize(("length", "stride"), [(41, 3), (40, 6), (44, 5)])  # each ends in a shorter window
def test_many_windows_per_forward_score_what_one_window_at_a_time_scores(length, stride):
    model = tiny_gpt(seed=2)
    token_ids = file_of(length, seed=3)
    one = perplexity_sliding_window(model, token_ids, context_length=6, stride=stride, batch_size=1)
    for batch_size in (None, 3, 100):
        many = perplexity_sliding_window(model, token_ids, context_length=6, stride=stride, batch_size=batch_size)
        assert many.tokens == one.tokens
        assert many.loss == pytest.approx(one.loss, abs=1e-6)


class AllLogits(nn.Module):
    """The wrapped GPT without ``logits_to_keep``: every position's logits, as the sliding window scored before."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, state=None):
        return self.model(input_ids, state)


@pytest.mark.parametrize("positional", ["learned", "rotary"])
@pytest.mark.parametrize(("length", "stride", "batch_size"), [(41, 3, None), (40, 6, 1), (44, 5, 3), (64, 3, 4)])
def test_a_gpt_scored_from_its_kept_logits_scores_what_all_its_logits_score(positional, length, stride, batch_size):
    torch.manual_seed(4)
    config = GPTConfig(vocab_size=V, context_length=6, d_model=8, num_heads=2, num_layers=2, positional=positional)
    model = GPT(config).double().eval()
    token_ids = file_of(length, seed=5)
    kept = []
    model.decoder.layers[-1].feed_forward.register_forward_hook(lambda m, inputs, out: kept.append(inputs[0].shape[1]))
    fast = perplexity_sliding_window(model, token_ids, context_length=6, stride=stride, batch_size=batch_size)
    if batch_size == 1:  # the first window keeps all 6 positions, the last its own, the others the scored ones
        assert kept[0] == 6 and set(kept[1:-1]) == {min(stride + 1, 6)}
    full = perplexity_sliding_window(
        AllLogits(model), token_ids, context_length=6, stride=stride, batch_size=batch_size
    )
    assert fast.tokens == full.tokens
    assert fast.loss == pytest.approx(full.loss, rel=1e-12)


def test_language_model_loss_is_the_mean_cross_entropy_of_the_scored_tokens_and_returns_the_state():
    model = rnn_lm()
    x = file_of(13).view(1, 13).repeat(2, 1)
    inputs, targets = x[:, :-1], x[:, 1:]
    keep_mask = torch.ones_like(inputs, dtype=torch.bool)
    keep_mask[1, 8:] = False
    output, state = language_model_loss(model, inputs, targets, keep_mask=keep_mask, label_smoothing=0.1)
    logits = model(inputs).logits
    expected = torch.cat(
        [
            F.cross_entropy(logits[0], targets[0], label_smoothing=0.1, reduction="none"),
            F.cross_entropy(logits[1, :8], targets[1, :8], label_smoothing=0.1, reduction="none"),
        ]
    ).mean()
    assert isinstance(output, LossOutput)
    assert output.num_tokens == 12 + 8
    assert_close(output.loss, expected)
    # the state continues row 1 from its last real input
    assert_close(model.reorder_state(state, torch.tensor([1])), model(inputs[1:, :8]).state)


def test_language_model_loss_over_two_windows_with_carried_state_equals_one_window():
    model = rnn_lm(cell="gru")
    x = file_of(21).view(3, 7)
    whole, _ = language_model_loss(model, x[:, :-1], x[:, 1:])
    first, state = language_model_loss(model, x[:, :3], x[:, 1:4])
    second, _ = language_model_loss(model, x[:, 3:-1], x[:, 4:], state)
    combined = (first.loss * first.num_tokens + second.loss * second.num_tokens) / (
        first.num_tokens + second.num_tokens
    )
    assert_close(combined, whole.loss)


def test_a_tiny_model_overfits_a_short_text_to_near_zero_loss():
    text = "the cat sat on the mat. "
    alphabet = sorted(set(text))
    ids = torch.tensor([alphabet.index(c) for c in text])
    torch.manual_seed(0)
    model = RNNLanguageModel(
        RNNLanguageModelConfig(vocab_size=len(alphabet), embedding_size=16, hidden_size=32, num_layers=1)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(150):
        output, _ = language_model_loss(model, ids[None, :-1], ids[None, 1:])
        optimizer.zero_grad()
        output.loss.backward()
        optimizer.step()
    assert perplexity_of_stream(model, ids, batch_size=1, bptt_len=8).loss < 0.05


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda m: perplexity_sliding_window(m, file_of(9), context_length=4, stride=5),
            "stride (5) must be an integer in [1, context_length] = [1, 4]",
        ),
        (
            lambda m: perplexity_sliding_window(m, file_of(9), context_length=4, stride=2, batch_size=0),
            "batch_size (0) must be None or an integer >= 1",
        ),
        (
            lambda m: perplexity_sliding_window(m, file_of(9), context_length=1, stride=1),
            "context_length (1) must be an integer >= 2",
        ),
        (
            lambda m: perplexity_of_stream(m, file_of(9).view(3, 3), batch_size=1, bptt_len=2),
            "token_ids must be a 1-D tensor of at least 2 tokens, got shape (3, 3)",
        ),
        (
            lambda m: perplexity_of_stream(m, file_of(9), batch_size=1, bptt_len=2, num_characters=0),
            "num_characters (0) must be None or an integer >= 1",
        ),
        (
            lambda m: perplexity_of_stream(m, file_of(9), batch_size=5, bptt_len=2),
            "9 tokens cannot fill 5 streams of at least 2 tokens (need >= 10)",
        ),
        (
            lambda m: language_model_loss(m, file_of(6).view(2, 3), file_of(6).view(3, 2)),
            "targets (3, 2) must have the shape of inputs (2, 3)",
        ),
    ],
)
def test_bad_arguments_give_the_promised_messages(call, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call(rnn_lm())
