from typing import NamedTuple

import pytest
import torch
from torch.testing import assert_close

from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.greedy import greedy_search
from seqlab.decoding.interface import SearchOutput, StepOutput, select_rows

ROWS = [0, 1, 2]


def _search(model, rows, **kwargs):
    start = torch.full((len(rows),), model.bos_id)
    return beam_search(model, model.initial_state(rows), start, eos_id=model.eos_id, **kwargs)


def _score(log_prob, length, length_penalty):
    return log_prob / length**length_penalty


def _brute_force(model, row, *, max_length, length_penalty):
    """Every sequence that ends at EOS or at max_length, with its score and log-prob, best first."""
    found = []

    def expand(prefix, token, state, log_prob):
        logits, state = model.step(torch.tensor([token]), state)
        for y, lp in enumerate(torch.log_softmax(logits[0], dim=-1)):
            sequence = (*prefix, y)
            if y == model.eos_id or len(sequence) == max_length:
                found.append((_score(log_prob + lp, len(sequence), length_penalty), log_prob + lp, sequence))
            else:
                expand(sequence, y, state, log_prob + lp)

    expand((), model.bos_id, model.initial_state([row]), torch.zeros((), dtype=torch.float64))
    return sorted(found, key=lambda hyp: -hyp[0])


def _reference_beam(model, row, *, max_length, num_beams, length_penalty):
    """Textbook beam search on one row, run to max_length without early stopping.

    Each step ranks all extensions of the live prefixes; EOS extensions among the num_beams best are finished,
    the num_beams best others stay live; live prefixes at max_length are finished too.
    """
    live, finished = [((), torch.zeros((), dtype=torch.float64), model.initial_state([row]))], []
    for _ in range(max_length):
        candidates = []
        for prefix, log_prob, state in live:
            token = prefix[-1] if prefix else model.bos_id
            logits, next_state = model.step(torch.tensor([token]), state)
            for y, lp in enumerate(torch.log_softmax(logits[0], dim=-1)):
                candidates.append(((*prefix, y), log_prob + lp, next_state))
        candidates.sort(key=lambda c: -c[1])
        finished += [c for c in candidates[:num_beams] if c[0][-1] == model.eos_id]
        live = [c for c in candidates if c[0][-1] != model.eos_id][:num_beams]
    finished += live
    ranked = [(_score(lp, len(seq), length_penalty), lp, seq) for seq, lp, _ in finished]
    return sorted(ranked, key=lambda hyp: -hyp[0])


def _as_output(hypotheses_per_row, eos_id, k):
    """The best k hypotheses of each row as a SearchOutput, padded like beam_search pads."""
    best = [hyps[:k] for hyps in hypotheses_per_row]
    T = max(len(seq) for hyps in best for _, _, seq in hyps)
    tokens = torch.full((len(best), k, T), eos_id)
    for b, hyps in enumerate(best):
        for j, (_, _, seq) in enumerate(hyps):
            tokens[b, j, : len(seq)] = torch.tensor(seq)
    return SearchOutput(
        tokens=tokens,
        lengths=torch.tensor([[len(seq) for _, _, seq in hyps] for hyps in best]),
        scores=torch.stack([torch.stack([s for s, _, _ in hyps]) for hyps in best]),
        log_probs=torch.stack([torch.stack([lp for _, lp, _ in hyps]) for hyps in best]),
    )


def _assert_same(actual, expected):
    assert torch.equal(actual.tokens, expected.tokens)
    assert torch.equal(actual.lengths, expected.lengths)
    assert_close(actual.scores, expected.scores)
    assert_close(actual.log_probs, expected.log_probs)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_wide_beam_equals_brute_force_enumeration(toy, length_penalty, teacher_forced):
    V, max_length = toy.vocab_size, 3
    every = [_brute_force(toy, row, max_length=max_length, length_penalty=length_penalty) for row in ROWS]
    n = len(every[0])
    assert n == sum((V - 1) ** t for t in range(max_length)) + (V - 1) ** max_length
    # The beam holds all extensions of the live prefixes (<= V * (V - 1) ** (max_length - 1)): no pruning.
    assert n >= V * (V - 1) ** (max_length - 1)
    out = _search(toy, ROWS, max_length=max_length, num_beams=n, num_return_sequences=n, length_penalty=length_penalty)
    _assert_same(out, _as_output(every, toy.eos_id, n))
    assert_close(out.log_probs, teacher_forced(toy, ROWS, out))


@pytest.mark.parametrize(
    ("num_beams", "length_penalty", "num_return_sequences"),
    [(1, 1.0, 1), (2, 0.0, 2), (2, 1.0, 1), (3, 1.0, 3), (3, -0.5, 2), (4, 2.0, 4)],
)
def test_narrow_beam_equals_a_per_row_reference(toy, num_beams, length_penalty, num_return_sequences):
    max_length = 6
    expected = [
        _reference_beam(toy, row, max_length=max_length, num_beams=num_beams, length_penalty=length_penalty)
        for row in ROWS
    ]
    out = _search(
        toy,
        ROWS,
        max_length=max_length,
        num_beams=num_beams,
        length_penalty=length_penalty,
        num_return_sequences=num_return_sequences,
    )
    _assert_same(out, _as_output(expected, toy.eos_id, num_return_sequences))


def test_beam_size_one_equals_greedy(toy):
    start = torch.full((len(ROWS),), toy.bos_id)
    greedy = greedy_search(toy, toy.initial_state(ROWS), start, eos_id=toy.eos_id, max_length=6)
    beam = _search(toy, ROWS, max_length=6, num_beams=1, length_penalty=0.0)
    _assert_same(beam, greedy)


def test_scores_are_the_teacher_forced_log_probs_over_length(toy, teacher_forced):
    out = _search(toy, ROWS, max_length=5, num_beams=3, num_return_sequences=3, length_penalty=0.7)
    assert_close(out.log_probs, teacher_forced(toy, ROWS, out))
    assert_close(out.scores, out.log_probs / out.lengths.double() ** 0.7)
    assert torch.all(out.scores[:, :-1] >= out.scores[:, 1:])
    beyond = torch.arange(out.tokens.shape[2]) >= out.lengths.unsqueeze(-1)
    assert torch.all(out.tokens[beyond] == toy.eos_id)


def test_batch_equals_each_row_alone(toy):
    kwargs = {"max_length": 5, "num_beams": 3, "num_return_sequences": 2}
    batch = _search(toy, ROWS, **kwargs)
    for b, row in enumerate(ROWS):
        alone = _search(toy, [row], **kwargs)
        T = alone.tokens.shape[2]
        assert torch.equal(batch.tokens[b : b + 1, :, :T], alone.tokens)
        assert torch.all(batch.tokens[b, :, T:] == toy.eos_id)
        assert torch.equal(batch.lengths[b : b + 1], alone.lengths)
        assert_close(batch.scores[b : b + 1], alone.scores)


class _CountingModel:
    def __init__(self, model):
        self.model, self.calls = model, 0
        self.bos_id, self.eos_id, self.initial_state = model.bos_id, model.eos_id, model.initial_state

    def step(self, tokens, state):
        self.calls += 1
        return self.model.step(tokens, state)

    def reorder_state(self, state, index):
        return self.model.reorder_state(state, index)


def test_stops_early_once_no_live_beam_can_win_and_still_matches_the_reference(cache_toy_factory):
    model = _CountingModel(cache_toy_factory(eos_bonus=4.0))
    out = _search(model, ROWS, max_length=8, num_beams=2, num_return_sequences=2, length_penalty=0.0)
    assert model.calls < 8
    expected = [_reference_beam(model.model, row, max_length=8, num_beams=2, length_penalty=0.0) for row in ROWS]
    _assert_same(out, _as_output(expected, model.eos_id, 2))


class _TableModel:
    """Next-token probabilities by prefix from a table, else ``default``; V = 3, EOS = 0, state (B, t)."""

    vocab_size, bos_id, eos_id = 3, 1, 0

    def __init__(self, table, default):
        self.table, self.default = table, default

    def initial_state(self, rows):
        return torch.zeros(len(rows), 0, dtype=torch.long)

    def step(self, tokens, state):
        fed = torch.cat([state, tokens.unsqueeze(1)], dim=1)  # (B, t), the start token first
        probs = [self.table.get(tuple(p[1:]), self.default) for p in fed.tolist()]
        return StepOutput(torch.tensor(probs, dtype=torch.float64).log(), fed)

    def reorder_state(self, state, index):
        return select_rows(state, index)


@pytest.mark.parametrize(
    ("length_penalty", "num_beams", "table", "default", "n_best"),
    [
        # [eos] scores log .6 = -0.51; the live [a] looks beaten if bounded at length t + 1 (log .3 / 2 =
        # -0.60), but [a] * 6, every later token certain, scores log .3 / 6 = -0.20.
        (1.0, 1, {(): [0.6, 0.3, 0.1]}, [1e-9, 1.0, 1e-9], [(1, 1, 1, 1, 1, 1)]),
        # Scores are log p * n: after step 2 the pool holds [eos] and [a, eos] (2 log(.45 * .15) = -5.4); the
        # live [a, a] (log(.45 * .75) = -1.09) * 6 = -6.5 looks beaten, but [a, a, eos] scores -1.1 * 3.
        (
            -1.0,
            2,
            {(): [0.5, 0.45, 0.05], (1,): [0.15, 0.75, 0.1], (1, 1): [0.99, 0.005, 0.005]},
            [1 / 3] * 3,
            [(0,), (1, 1, 0)],
        ),
    ],
)
def test_early_stopping_bound_is_exact_for_every_length_penalty(length_penalty, num_beams, table, default, n_best):
    model = _TableModel(table, default)
    kwargs = {"num_beams": num_beams, "length_penalty": length_penalty}
    out = _search(model, [0], max_length=6, num_return_sequences=num_beams, **kwargs)
    _assert_same(out, _as_output([_reference_beam(model, 0, max_length=6, **kwargs)], model.eos_id, num_beams))
    assert [tuple(y[:n].tolist()) for y, n in zip(out.tokens[0], out.lengths[0], strict=True)] == n_best


def test_fewer_possible_hypotheses_than_requested_score_minus_inf(cache_toy_factory):
    model = cache_toy_factory()  # V = 3, max_length 1: only [eos], [1], [2]
    out = _search(model, [0], max_length=1, num_beams=5, num_return_sequences=5)
    assert torch.equal(out.lengths, torch.tensor([[1, 1, 1, 0, 0]]))
    assert torch.equal(out.scores[0, 3:].isneginf(), torch.tensor([True, True]))
    assert sorted(out.tokens[0, :3, 0].tolist()) == [0, 1, 2]
    assert torch.all(out.tokens[0, 3:] == model.eos_id)


class _State(NamedTuple):
    h: torch.Tensor
    extra: dict


def test_select_rows_maps_nested_states():
    h, c, kv = torch.arange(6.0).view(3, 2), torch.arange(3), torch.arange(24.0).view(2, 3, 4)
    state = _State(h, {"layers": [(c, None)], "step": 7})
    index = torch.tensor([2, 2, 0])
    picked = select_rows(state, index)
    assert isinstance(picked, _State) and isinstance(picked.extra["layers"][0], tuple)
    assert torch.equal(picked.h, h[[2, 2, 0]])
    assert torch.equal(picked.extra["layers"][0][0], c[[2, 2, 0]])
    assert picked.extra["layers"][0][1] is None and picked.extra["step"] == 7
    assert torch.equal(select_rows([kv], index, dim=1)[0], kv[:, [2, 2, 0]])


def test_errors(toy):
    with pytest.raises(ValueError, match=r"num_beams must be >= 1, got 0"):
        _search(toy, ROWS, max_length=3, num_beams=0)
    with pytest.raises(ValueError, match=r"num_return_sequences \(5\) must be in \[1, 4\] \(num_beams\)"):
        _search(toy, ROWS, max_length=3, num_beams=4, num_return_sequences=5)
    with pytest.raises(ValueError, match=r"num_return_sequences \(0\) must be in \[1, 4\] \(num_beams\)"):
        _search(toy, ROWS, max_length=3, num_beams=4, num_return_sequences=0)
    with pytest.raises(ValueError, match=r"max_length must be >= 1, got 0"):
        _search(toy, ROWS, max_length=0)
    with pytest.raises(ValueError, match=r"eos_id \(9\) is outside the vocabulary \[0, \d\)"):
        beam_search(toy, toy.initial_state(ROWS), torch.full((3,), toy.bos_id), eos_id=9, max_length=3)


def test_without_an_eos_every_hypothesis_runs_max_length_and_a_wide_beam_enumerates_them(toy):
    """eos_id=None: no token ends a hypothesis, so a beam of V ** n holds every sequence of n tokens, best first."""
    V, n = toy.vocab_size, 3
    start = torch.full((len(ROWS),), toy.bos_id)
    out = beam_search(
        toy, toy.initial_state(ROWS), start, eos_id=None, max_length=n, num_beams=V**n, num_return_sequences=V**n
    )
    assert torch.all(out.lengths == n)
    for b, row in enumerate(ROWS):
        scored = []
        for k in range(V**n):
            sequence = [k // V**i % V for i in reversed(range(n))]
            state, token, log_prob = toy.initial_state([row]), toy.bos_id, 0.0
            with torch.no_grad():
                for y in sequence:
                    logits, state = toy.step(torch.tensor([token]), state)
                    log_prob += float(torch.log_softmax(logits[0].double(), dim=-1)[y])
                    token = y
            scored.append((log_prob, sequence))
        scored.sort(key=lambda pair: -pair[0])
        assert_close(out.log_probs[b].double(), torch.tensor([lp for lp, _ in scored], dtype=torch.float64))
        assert out.tokens[b].tolist() == [sequence for _, sequence in scored]
        assert_close(out.scores[b], out.log_probs[b] / n)
