import itertools
import math

import pytest
import torch
from torch.testing import assert_close

from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.coverage import CoverageState, CoverageStepModel, coverage_penalty
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq, TransformerSeq2SeqConfig

SRC = torch.tensor([[3, 4, 5, 6], [5, 3, 0, 0]])  # the second source is padded after 2 letters
SRC_LENGTHS = torch.tensor([4, 2])


def _rnn(tgt_vocab_size=7):
    torch.manual_seed(0)
    config = RNNSeq2SeqConfig(src_vocab_size=7, tgt_vocab_size=tgt_vocab_size, embedding_size=4, hidden_size=5)
    return RNNSeq2Seq(config).double().eval()


def _transformer():
    torch.manual_seed(0)
    config = TransformerSeq2SeqConfig(
        src_vocab_size=7, tgt_vocab_size=7, d_model=8, num_heads=2, d_ff=16, encoder_layers=1, decoder_layers=2
    )
    return TransformerSeq2Seq(config).double().eval()


def test_coverage_penalty_by_hand():
    # beta * (log 0.5 + log min(1.2, 1) + log 0.25); the padded position is not a letter and costs nothing.
    state = CoverageState(None, torch.tensor([[0.5, 1.2, 0.25, 0.0]]), torch.tensor([[True, True, True, False]]))
    assert_close(coverage_penalty(state, 0.2), torch.tensor([0.2 * math.log(0.125)]))
    full = CoverageState(None, torch.tensor([[1.0, 3.0]]), torch.tensor([[True, True]]))
    assert coverage_penalty(full, 0.2).item() == 0.0


def test_a_letter_never_attended_costs_a_finite_amount():
    state = CoverageState(None, torch.tensor([[0.0, 1.0]]), torch.tensor([[True, True]]))
    assert_close(coverage_penalty(state, 1.0), torch.tensor([math.log(torch.finfo(torch.float32).tiny)]))


def test_a_negative_beta_is_refused():
    state = CoverageState(None, torch.ones(1, 1), torch.ones(1, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"the coverage penalty's beta must be >= 0, got -0.1"):
        coverage_penalty(state, -0.1)


@pytest.mark.parametrize("make", [_rnn, _transformer])
def test_stepwise_coverage_is_the_teacher_forced_attention_summed_over_steps(make):
    model = make()
    tgt_in = torch.tensor([[1, 3, 4, 5], [1, 6, 3, 3]])
    forward = model(SRC, SRC_LENGTHS, tgt_in, **({"need_weights": True} if make is _transformer else {}))
    wrapper = CoverageStepModel(model)
    keep = torch.arange(4) < SRC_LENGTHS.unsqueeze(1)
    state = wrapper.start(model.encode(SRC, SRC_LENGTHS), keep)
    for t in range(tgt_in.shape[1]):
        out = wrapper.step(tgt_in[:, t], state)
        assert_close(out.logits, forward.logits[:, t])
        state = out.state
    assert_close(state.coverage, forward.attention.sum(dim=1).to(state.coverage.dtype))
    assert (state.coverage[1, 2:] == 0).all()


def _brute_force(model, *, max_length, length_penalty, beta):
    """Every hypothesis of the first source (ending at EOS or at max_length) scored by teacher forcing:
    log p / n ** length_penalty + beta * sum_i log min(sum_j p_ij, 1), best first."""
    V, eos = model.config.tgt_vocab_size, model.config.eos_id
    sequences = [
        s
        for n in range(1, max_length + 1)
        for s in itertools.product(range(V), repeat=n)
        if (eos not in s[:-1]) and (s[-1] == eos or n == max_length)
    ]
    found = []
    for s in sequences:
        out = model(SRC[:1], SRC_LENGTHS[:1], torch.tensor([[1, *s[:-1]]]))
        log_p = torch.log_softmax(out.logits[0].double(), dim=-1)[torch.arange(len(s)), torch.tensor(s)].sum()
        coverage = out.attention[0].sum(dim=0).clamp(max=1.0)
        found.append((log_p.item() / len(s) ** length_penalty + beta * coverage.log().sum().item(), s))
    return sorted(found, reverse=True)


@pytest.mark.parametrize(("length_penalty", "beta"), [(0.0, 0.0), (0.0, 1.0), (1.0, 5.0)])
def test_beam_search_with_the_coverage_penalty_ranks_as_exhaustive_search(length_penalty, beta):
    # V = 4 and 3 steps: a beam of 36 never prunes (at most 9 live prefixes x 4 tokens), so the beam's n-best
    # must be the exhaustive ranking under s(Y, X) = log p / lp + cp.
    model = _rnn(tgt_vocab_size=4)
    wrapper = CoverageStepModel(model)
    state = wrapper.start(model.encode(SRC[:1], SRC_LENGTHS[:1]), torch.ones(1, 4, dtype=torch.bool))
    out = beam_search(
        wrapper,
        state,
        torch.tensor([1]),
        eos_id=2,
        max_length=3,
        num_beams=36,
        length_penalty=length_penalty,
        num_return_sequences=5,
        finished_score=lambda s: coverage_penalty(s, beta),
    )
    expected = _brute_force(model, max_length=3, length_penalty=length_penalty, beta=beta)[:5]
    assert_close(out.scores[0], torch.tensor([score for score, _ in expected], dtype=out.scores.dtype))
    got = [tuple(out.tokens[0, k, : out.lengths[0, k]].tolist()) for k in range(5)]
    assert got == [s for _, s in expected]


def test_attention_step_refuses_the_fixed_context_model():
    config = RNNSeq2SeqConfig(src_vocab_size=7, tgt_vocab_size=7, embedding_size=4, hidden_size=5, attention="none")
    model = RNNSeq2Seq(config).eval()
    with pytest.raises(ValueError, match="a model with attention 'none' has no attention weights to sum"):
        model.attention_step(torch.tensor([1, 1]), model.encode(SRC, SRC_LENGTHS))
