import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from seqlab.decoding.greedy import greedy_search
from seqlab.decoding.interface import SearchOutput, StepOutput

ROWS = [0, 1, 2, 3, 4]


class ScriptedModel:
    """Emits script[b, t] at step t with probability ~1; state (script (B, M), t) has an int leaf."""

    def __init__(self, script: list[list[int]]) -> None:
        self.script, self.calls = torch.tensor(script), 0

    def step(self, tokens: Tensor, state):
        script, t = state
        self.calls += 1
        logits = torch.nn.functional.one_hot(script[:, t], 5).double() * 50.0
        return StepOutput(logits, (script, t + 1))

    def reorder_state(self, state, index):
        return (state[0][index], state[1])


def _reference_greedy(model, row: int, max_length: int) -> tuple[list[int], Tensor]:
    """One row alone, decoded by a plain loop: argmax, stop at EOS."""
    state, token, tokens, log_prob = (
        model.initial_state([row]),
        model.bos_id,
        [],
        torch.zeros((), dtype=torch.float64),
    )
    for _ in range(max_length):
        logits, state = model.step(torch.tensor([token]), state)
        log_probs = torch.log_softmax(logits[0], dim=-1)
        token = int(log_probs.argmax())
        tokens.append(token)
        log_prob = log_prob + log_probs[token]
        if token == model.eos_id:
            break
    return tokens, log_prob


def test_greedy_equals_a_per_row_argmax_loop(toy, teacher_forced):
    max_length = 6
    out = greedy_search(
        toy,
        toy.initial_state(ROWS),
        torch.full((len(ROWS),), toy.bos_id),
        eos_id=toy.eos_id,
        max_length=max_length,
    )
    references = [_reference_greedy(toy, row, max_length) for row in ROWS]
    T = max(len(tokens) for tokens, _ in references)
    expected = torch.full((len(ROWS), 1, T), toy.eos_id)
    for b, (tokens, _) in enumerate(references):
        expected[b, 0, : len(tokens)] = torch.tensor(tokens)
    lengths = torch.tensor([[len(tokens)] for tokens, _ in references])
    # The rows must exercise both ways of stopping, or the test would not cover padding.
    assert lengths.min() < max_length and lengths.max() == max_length

    assert torch.equal(out.tokens, expected)
    assert torch.equal(out.lengths, lengths)
    assert_close(out.log_probs, torch.stack([lp for _, lp in references]).unsqueeze(1))
    assert_close(out.scores, out.log_probs)
    assert_close(out.log_probs, teacher_forced(toy, ROWS, out))


def test_batch_equals_each_row_alone(toy):
    def run(rows):
        start = torch.full((len(rows),), toy.bos_id)
        return greedy_search(toy, toy.initial_state(rows), start, eos_id=toy.eos_id, max_length=5)

    batch = run(ROWS)
    for b, row in enumerate(ROWS):
        alone = run([row])
        T = alone.tokens.shape[2]
        assert torch.equal(batch.tokens[b : b + 1, :, :T], alone.tokens)
        assert torch.all(batch.tokens[b, :, T:] == toy.eos_id)
        assert torch.equal(batch.lengths[b : b + 1], alone.lengths)
        assert_close(batch.log_probs[b : b + 1], alone.log_probs)


def test_stops_when_every_row_emitted_eos_and_pads_with_eos():
    eos = 0
    model = ScriptedModel([[3, 4, eos, 2, 2, 2], [1, eos, 4, 4, 4, 4]])
    out = greedy_search(model, (model.script, 0), torch.tensor([1, 1]), eos_id=eos, max_length=6)
    assert isinstance(out, SearchOutput)
    assert torch.equal(out.tokens, torch.tensor([[[3, 4, eos]], [[1, eos, eos]]]))
    assert torch.equal(out.lengths, torch.tensor([[3], [2]]))
    assert model.calls == 3
    # Probabilities ~1 and the ignored step after row 1's EOS adds nothing: log-prob ~ 0, not ~ -50.
    assert_close(out.log_probs, torch.zeros(2, 1, dtype=torch.float64), atol=1e-12, rtol=0)


def test_max_length_cuts_rows_without_eos():
    model = ScriptedModel([[3, 4, 0, 2], [1, 0, 4, 4]])
    out = greedy_search(model, (model.script, 0), torch.tensor([1, 1]), eos_id=0, max_length=2)
    assert torch.equal(out.tokens, torch.tensor([[[3, 4]], [[1, 0]]]))
    assert torch.equal(out.lengths, torch.tensor([[2], [2]]))
    assert model.calls == 2


def test_errors():
    model = ScriptedModel([[3, 4, 0]])
    state, start = (model.script, 0), torch.tensor([1])
    with pytest.raises(ValueError, match=r"max_length must be >= 1, got 0"):
        greedy_search(model, state, start, eos_id=0, max_length=0)
    with pytest.raises(ValueError, match=r"start_tokens must have shape \(B,\), got \(1, 1\)"):
        greedy_search(model, state, start.view(1, 1), eos_id=0, max_length=3)
    with pytest.raises(ValueError, match=r"eos_id \(5\) is outside the vocabulary \[0, 5\)"):
        greedy_search(model, state, start, eos_id=5, max_length=3)
    with pytest.raises(ValueError, match=r"model.step must return logits of shape \(2, V\), got \(1, 5\)"):
        greedy_search(model, state, torch.tensor([1, 1]), eos_id=0, max_length=3)
