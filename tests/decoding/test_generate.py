"""generate() over two toy language models: a bigram table, and a model whose logits depend on the position and on
the whole real prefix (like a Transformer with a KV cache), with a context length that it enforces itself."""

from typing import NamedTuple

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from seqlab.decoding import GenerateOutput, generate, greedy_search
from seqlab.models.interfaces import StepOutput, select_rows


class BigramLM:
    """logits = table[previous token]; state: the previous token (B,)."""

    context_length = None

    def __init__(self, table: Tensor) -> None:
        self.table, self.prefills, self.steps = table, 0, 0

    def prefill(self, input_ids, keep_mask=None):
        self.prefills += 1
        return StepOutput(self.table[input_ids[:, -1]], input_ids[:, -1])

    def step(self, tokens, state):
        self.steps += 1
        return StepOutput(self.table[tokens], tokens)

    def reorder_state(self, state, index):
        return select_rows(state, index)


class PrefixState(NamedTuple):
    tokens: Tensor  # (B, t) the prompt (left padding included) and the fed tokens
    keep_mask: Tensor  # (B, t)


class PrefixLM:
    """logits = bias[n] + sum_i table[i, x_i] over the n real tokens x_i at their real positions i; V = 4."""

    vocab_size = 4

    def __init__(self, context_length: int = 8, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.context_length = context_length
        self.bias = torch.randn(context_length + 1, self.vocab_size, generator=g, dtype=torch.float64)
        self.table = torch.randn(context_length, self.vocab_size, self.vocab_size, generator=g, dtype=torch.float64)
        self.prefills, self.steps = 0, 0

    def _logits(self, state: PrefixState) -> Tensor:
        n = state.keep_mask.sum(dim=1)  # (B,)
        assert int(n.max()) <= self.context_length, "fed beyond the context"
        positions = (state.keep_mask.cumsum(dim=1) - 1).clamp(min=0)  # (B, t) real positions
        terms = self.table[positions, state.tokens] * state.keep_mask.unsqueeze(-1)  # (B, t, V)
        return self.bias[n] + terms.sum(dim=1)

    def prefill(self, input_ids, keep_mask=None):
        self.prefills += 1
        keep_mask = torch.ones_like(input_ids, dtype=torch.bool) if keep_mask is None else keep_mask
        state = PrefixState(input_ids, keep_mask)
        return StepOutput(self._logits(state), state)

    def step(self, tokens, state):
        self.steps += 1
        state = PrefixState(
            torch.cat([state.tokens, tokens.unsqueeze(1)], dim=1),
            torch.cat([state.keep_mask, torch.ones_like(tokens, dtype=torch.bool).unsqueeze(1)], dim=1),
        )
        return StepOutput(self._logits(state), state)

    def reorder_state(self, state, index):
        return select_rows(state, index)


def _bigram(seed=0, V=5):
    return BigramLM(torch.randn(V, V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2)


def _left_pad(prompts, pad=3):
    T = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (T - len(p)) + p for p in prompts])
    keep = torch.tensor([[False] * (T - len(p)) + [True] * len(p) for p in prompts])
    return ids, keep


PROMPTS = [[1], [2, 1, 3, 3], [0, 2], [3, 1, 1]]


def _model_log_prob(model, prompt, continuation):
    """sum_t log p(y_t | prompt, y_<t) under the unprocessed model, one token at a time on a single row."""
    logits, state = model.prefill(torch.tensor([prompt]))
    total = torch.zeros((), dtype=torch.float64)
    for y in continuation:
        total = total + torch.log_softmax(logits[0], dim=-1)[y]
        logits, state = model.step(torch.tensor([y]), state)
    return total


@pytest.mark.parametrize("make", [_bigram, PrefixLM])
def test_greedy_generation_equals_greedy_search_from_the_state_before_the_last_prompt_token(make):
    model = make()
    ids = torch.tensor([[1, 2, 3], [0, 0, 1], [3, 2, 2]])
    out = generate(model, ids, max_new_tokens=4, eos_id=3)
    assert isinstance(out, GenerateOutput) and model.prefills == 1
    assert out.lengths.min() < 4 and out.lengths.max() == 4  # rows stop at EOS and at max_new_tokens
    state = model.prefill(ids[:, :-1]).state
    reference = greedy_search(model, state, ids[:, -1], eos_id=3, max_length=4)
    assert torch.equal(out.tokens[:, 3:], reference.tokens[:, 0])
    assert torch.equal(out.lengths, reference.lengths[:, 0])
    assert_close(out.log_probs, reference.log_probs[:, 0])


def _hypotheses(model, prompt, max_new, eos_id):
    """Every continuation that ends at eos_id or after max_new tokens, with its model log-prob (brute force)."""
    found = []

    def expand(logits, state, prefix, log_prob):
        for y, lp in enumerate(torch.log_softmax(logits[0], dim=-1)):
            sequence = (*prefix, y)
            if y == eos_id or len(sequence) == max_new:
                found.append((sequence, log_prob + lp))
            else:
                expand(*model.step(torch.tensor([y]), state), sequence, log_prob + lp)

    expand(*model.prefill(torch.tensor([prompt])), (), 0.0)
    return found


@pytest.mark.parametrize(("eos_id", "length_penalty"), [(0, 1.0), (0, 0.0), (2, 2.0), (None, 1.0)])
def test_wide_beam_finds_the_brute_force_best(eos_id, length_penalty):
    model, prompts, max_new = PrefixLM(), PROMPTS[:3], 3
    every = [_hypotheses(model, p, max_new, eos_id) for p in prompts]
    assert len(every[0]) == (40 if eos_id is not None else 64)  # 1 + 3 + 9 + 27, or 4 ** 3
    ids, keep = _left_pad(prompts)
    out = generate(
        model, ids, keep_mask=keep, max_new_tokens=max_new, num_beams=64, eos_id=eos_id, length_penalty=length_penalty
    )
    for b, hyps in enumerate(every):
        best, log_prob = max(hyps, key=lambda h: h[1] / len(h[0]) ** length_penalty)
        assert out.tokens[b, ids.shape[1] : ids.shape[1] + len(best)].tolist() == list(best)
        assert int(out.lengths[b]) == len(best)
        assert_close(out.log_probs[b], log_prob)


@pytest.mark.parametrize(
    "settings",
    [
        {"eos_id": 0},
        {"eos_id": 3, "repetition_penalty": 1.7, "no_repeat_ngram_size": 2},
        {"num_beams": 3, "eos_id": 0},
        {"num_beams": 2, "eos_id": 3, "no_repeat_ngram_size": 2, "repetition_penalty": 0.8, "length_penalty": 0.5},
        {"num_beams": 2, "no_repeat_ngram_size": 3},
    ],
)
def test_left_padded_batch_equals_each_prompt_alone(settings):
    model = PrefixLM()
    ids, keep = _left_pad(PROMPTS)
    T = ids.shape[1]
    batch = generate(model, ids, keep_mask=keep, max_new_tokens=4, **settings)
    if "eos_id" in settings:
        assert batch.lengths.min() < 4 and batch.lengths.max() == 4
    for b, prompt in enumerate(PROMPTS):
        alone = generate(model, torch.tensor([prompt]), max_new_tokens=4, **settings)
        n = int(alone.lengths[0])
        assert int(batch.lengths[b]) == n
        assert torch.equal(batch.tokens[b, T : T + n], alone.tokens[0, len(prompt) :][:n])
        assert torch.equal(batch.tokens[b, :T], ids[b])
        assert_close(batch.log_probs[b], alone.log_probs[0])


def test_log_probs_are_the_unprocessed_model_log_probs_of_the_generated_tokens():
    model = PrefixLM()
    ids, keep = _left_pad(PROMPTS)
    T = ids.shape[1]
    settings = {"do_sample": True, "temperature": 0.7, "top_k": 3, "repetition_penalty": 1.3}
    out = generate(model, ids, keep_mask=keep, max_new_tokens=5, eos_id=0, generator=torch.manual_seed(0), **settings)
    for b, prompt in enumerate(PROMPTS):
        continuation = out.tokens[b, T : T + int(out.lengths[b])].tolist()
        assert_close(out.log_probs[b], _model_log_prob(model, prompt, continuation))


def test_sampling_is_reproducible_and_cold_sampling_is_greedy():
    model = _bigram(1)
    ids = torch.tensor([[1], [2], [4]])

    def run(**kwargs):
        return generate(model, ids, max_new_tokens=12, do_sample=True, **kwargs).tokens

    assert torch.equal(run(generator=torch.Generator().manual_seed(5)), run(generator=torch.Generator().manual_seed(5)))
    assert not torch.equal(
        run(generator=torch.Generator().manual_seed(5)), run(generator=torch.Generator().manual_seed(6))
    )
    cold = run(temperature=1e-4, generator=torch.Generator().manual_seed(5))
    assert torch.equal(cold, generate(model, ids, max_new_tokens=12).tokens)


def _chain(V=6):
    """A bigram model that almost surely walks 1 -> 2 -> 3 -> 4 -> 5 -> 0 -> 1 ..."""
    table = torch.full((V, V), -30.0, dtype=torch.float64)
    table[torch.arange(V), (torch.arange(V) + 1) % V] = 30.0
    return BigramLM(table)


def test_stops_at_eos_and_pads_finished_rows():
    model = _chain()
    out = generate(model, torch.tensor([[3], [1], [5]]), max_new_tokens=6, eos_id=0, pad_id=4)
    assert out.tokens.tolist() == [[3, 4, 5, 0, 4, 4], [1, 2, 3, 4, 5, 0], [5, 0, 4, 4, 4, 4]]
    assert out.lengths.tolist() == [3, 5, 1]
    assert model.prefills == 1 and model.steps == 4  # the last token is never fed back
    assert_close(out.log_probs, torch.zeros(3, dtype=torch.float64), atol=1e-20, rtol=0)


@pytest.mark.parametrize("num_beams", [1, 2])
def test_a_pad_id_of_zero_fills_finished_rows_though_it_is_falsy(num_beams):
    out = generate(_chain(), torch.tensor([[1], [5]]), max_new_tokens=6, eos_id=3, pad_id=0, num_beams=num_beams)
    assert out.tokens.tolist() == [[1, 2, 3, 0, 0], [5, 0, 1, 2, 3]]  # up to the longest row
    assert out.lengths.tolist() == [2, 4]


def test_beam_search_fills_every_position_after_a_rows_length_with_pad_id():
    ids, keep = _left_pad(PROMPTS)
    out = generate(PrefixLM(), ids, keep_mask=keep, max_new_tokens=4, num_beams=3, eos_id=1, pad_id=2)
    generated = out.tokens[:, ids.shape[1] :]
    assert out.lengths.min() < generated.shape[1]  # some row ended early and was padded
    for b, n in enumerate(out.lengths.tolist()):
        assert generated[b, n:].tolist() == [2] * (generated.shape[1] - n)
        assert n == generated.shape[1] or generated[b, n - 1] == 1  # a row ends early only at its eos


@pytest.mark.parametrize("num_beams", [1, 2])
def test_outputs_are_ordinary_tensors_the_caller_may_change(num_beams):
    out = generate(_chain(), torch.tensor([[3], [1]]), max_new_tokens=3, num_beams=num_beams)
    for tensor in out:
        assert not tensor.is_inference()
    out.tokens[:, 0] = 2  # an inference tensor would refuse this in-place write
    assert out.tokens[:, 0].tolist() == [2, 2]


def test_stop_callback_ends_a_row_after_the_token_it_flags():
    model, asked = _chain(), []

    def stop(generated):
        asked.append(generated)
        return 3 in generated

    out = generate(model, torch.tensor([[1], [4]]), max_new_tokens=4, stop=stop)
    assert out.tokens.tolist() == [[1, 2, 3, 0, 0], [4, 5, 0, 1, 2]]
    assert out.lengths.tolist() == [2, 4]
    assert asked[:2] == [[2], [5]] and asked[2:4] == [[2, 3], [5, 0]] and asked[4:] == [[5, 0, 1], [5, 0, 1, 2]]


def test_streamer_receives_each_steps_tokens_in_order():
    model, received = PrefixLM(), []
    ids, keep = _left_pad(PROMPTS)
    out = generate(model, ids, keep_mask=keep, max_new_tokens=5, eos_id=1, streamer=received.append)
    assert len(received) == out.tokens.shape[1] - ids.shape[1]
    assert torch.equal(torch.stack(received, dim=1), out.tokens[:, ids.shape[1] :])


@pytest.mark.parametrize("num_beams", [1, 3])
def test_rows_stop_when_prompt_and_generated_fill_the_context(num_beams):
    model = PrefixLM(context_length=6)
    ids, keep = _left_pad([[1, 2, 3, 1], [2]])
    out = generate(model, ids, keep_mask=keep, max_new_tokens=10, num_beams=num_beams)
    # Greedy: each row to its own limit; beam search: the batch's smallest room.
    assert out.lengths.tolist() == ([2, 5] if num_beams == 1 else [2, 2])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_new_tokens": 0}, r"max_new_tokens \(0\) must be an integer >= 1"),
        ({"do_sample": True, "top_p": 1.5}, r"top_p \(1\.5\) must be None or a finite number > 0\.0 and <= 1\.0"),
        ({"do_sample": True, "top_p": 0.0}, r"top_p \(0\.0\) must be None or a finite number > 0\.0 and <= 1\.0"),
        ({"do_sample": True, "top_k": 0}, r"top_k \(0\) must be None or an integer >= 1"),
        ({"do_sample": True, "temperature": 0.0}, r"temperature \(0\.0\) must be a finite number > 0\.0"),
        ({"do_sample": True, "min_p": 2.0}, r"min_p \(2\.0\) must be None or a finite number >= 0\.0 and <= 1\.0"),
        ({"top_k": 5}, r"top_k \(5\) applies only with do_sample=True"),
        ({"do_sample": True, "num_beams": 3}, r"num_beams \(3\) > 1 is not supported with do_sample=True"),
        ({"num_beams": 0}, r"num_beams \(0\) must be an integer >= 1"),
        ({"num_beams": 2, "streamer": print}, r"streamer is not supported with num_beams \(2\) > 1"),
        ({"num_beams": 2, "stop": bool}, r"stop is not supported with num_beams \(2\) > 1"),
        ({"repetition_penalty": 0.0}, r"repetition_penalty \(0\.0\) must be a finite number > 0\.0"),
        ({"no_repeat_ngram_size": -1}, r"no_repeat_ngram_size \(-1\) must be an integer >= 0"),
        ({"eos_id": 4}, r"eos_id \(4\) must be in \[0, 4\)"),
        ({"pad_id": -1}, r"pad_id \(-1\) must be None or an integer >= 0"),
        ({"do_sample": 1}, r"do_sample \(1\) must be true or false"),
        ({"no_repeat_ngram_size": 1}, r"no_repeat_ngram_size \(1\) bans every token of the vocabulary in rows \[0\]"),
    ],
)
def test_bad_settings_give_one_line_messages(settings, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        generate(PrefixLM(), torch.tensor([[1, 2, 3, 0]]), **{"max_new_tokens": 3, **settings})


def test_bad_prompts_give_one_line_messages():
    model = PrefixLM(context_length=4)
    with pytest.raises(
        ValueError, match=r"^prompt of 4 tokens leaves no room to generate in the model's context_length \(4\)$"
    ):
        generate(model, torch.tensor([[1, 2, 3, 1]]), max_new_tokens=1)
    with pytest.raises(ValueError, match=r"^prompts \[1\] have no real token \(keep_mask all False\)$"):
        generate(model, torch.tensor([[1], [2]]), keep_mask=torch.tensor([[True], [False]]), max_new_tokens=1)
    with pytest.raises(ValueError, match=r"^input_ids must have shape \(B, T\) with T >= 1, got \(3,\)$"):
        generate(model, torch.tensor([1, 2, 3]), max_new_tokens=1)
    with pytest.raises(ValueError, match=r"^input_ids has no prompts \(B = 0, shape \(0, 3\)\); give at least one$"):
        generate(model, torch.zeros(0, 3, dtype=torch.long), max_new_tokens=1)
    with pytest.raises(ValueError, match=r"^input_ids holds token id -1; token ids are >= 0$"):
        generate(model, torch.tensor([[1, -1]]), max_new_tokens=1)
    with pytest.raises(TypeError, match=r"^input_ids must be an integer tensor of token ids, got torch.float32$"):
        generate(model, torch.tensor([[1.0, 2.0]]), max_new_tokens=1)
    with pytest.raises(TypeError, match=r"^input_ids must be a tensor of token ids, got list$"):
        generate(model, [[1, 2]], max_new_tokens=1)


class InPlacePrefixLM(PrefixLM):
    """PrefixLM declaring ``InPlaceReorderModel``: an in-place reorder records the flag and then wrecks the state
    it was given (what a state given up may suffer), so a search that read it again would go wrong."""

    def __init__(self) -> None:
        super().__init__()
        self.in_place_flags = []

    def prefill(self, input_ids, keep_mask=None):  # a state of its own, not the caller's prompt tensors
        return super().prefill(input_ids.clone(), None if keep_mask is None else keep_mask.clone())

    def reorder_state(self, state, index, *, in_place=False):
        self.in_place_flags.append(in_place)
        reordered = select_rows(state, index)
        if in_place:
            state.tokens.fill_(0)
            state.keep_mask.fill_(False)
        return reordered


class CopyCountingPrefixLM(PrefixLM):
    """PrefixLM without the keyword (reordered by copy), counting its reorders."""

    def __init__(self) -> None:
        super().__init__()
        self.reorders = 0

    def reorder_state(self, state, index):
        self.reorders += 1
        return super().reorder_state(state, index)


@pytest.mark.parametrize("eos_id", [None, 1])
def test_beam_search_reorders_in_place_only_a_model_that_declares_it_and_the_tokens_do_not_change(eos_id):
    ids, keep = _left_pad(PROMPTS)
    settings = {"keep_mask": keep, "max_new_tokens": 5, "num_beams": 3, "eos_id": eos_id}
    declared, copied = InPlacePrefixLM(), CopyCountingPrefixLM()
    out, reference = generate(declared, ids, **settings), generate(copied, ids, **settings)
    assert declared.in_place_flags and set(declared.in_place_flags) == {True}
    assert copied.reorders == len(declared.in_place_flags)  # the same reorders, by copy (no keyword passed)
    assert torch.equal(out.tokens, reference.tokens) and torch.equal(out.lengths, reference.lengths)
    assert_close(out.log_probs, reference.log_probs)
