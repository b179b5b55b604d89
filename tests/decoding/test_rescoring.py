"""N-best rescoring: sequence log-probabilities against step-by-step decoding, and the re-ranking rule."""

import math

import pytest
import torch
from torch.testing import assert_close

from seqlab.data.batching import collate_seq2seq
from seqlab.decoding.rescoring import rerank, sequence_log_probs
from seqlab.errors import ConfigError
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq, TransformerSeq2SeqConfig

BOS, EOS = 1, 2


def _models():
    torch.manual_seed(0)
    rnn = RNNSeq2Seq(RNNSeq2SeqConfig(8, 9, embedding_size=6, hidden_size=8, encoder_layers=1))
    transformer = TransformerSeq2Seq(
        TransformerSeq2SeqConfig(8, 9, d_model=8, num_heads=2, d_ff=16, encoder_layers=1, decoder_layers=1)
    )
    return rnn.double().eval(), transformer.double().eval()


def _stepped_log_prob(model, source, target):
    """log p(target + EOS | source) by feeding one token at a time through ``step`` (the decoders' path)."""
    state = model.encode(torch.tensor([source]), torch.tensor([len(source)]))
    total, previous = 0.0, BOS
    for token in [*target, EOS]:
        out = model.step(torch.tensor([previous]), state)
        total += torch.log_softmax(out.logits, dim=-1)[0, token].item()
        state, previous = out.state, token
    return total


@pytest.mark.parametrize("which", [0, 1])
def test_sequence_log_probs_equal_the_sum_of_step_by_step_log_probs(which):
    model = _models()[which]
    pairs = [([3, 4, 5, 6], [5, 6, 7]), ([7, 3], [8]), ([5], [])]  # different lengths: padding adds nothing
    got = sequence_log_probs(model, collate_seq2seq(pairs))
    expected = torch.tensor([_stepped_log_prob(model, s, t) for s, t in pairs], dtype=torch.float64)
    assert_close(got, expected)


def test_several_models_score_the_log_of_their_mean_per_token_probability():
    """An ensemble's log p(y | x) = sum_t log mean_m p_m(y_t | y_<t, x), each p_m stepped token by token here."""
    models = _models()
    pairs = [([3, 4, 5, 6], [5, 6, 7]), ([7, 3], [8]), ([5], [])]
    expected = []
    for source, target in pairs:
        states = [m.encode(torch.tensor([source]), torch.tensor([len(source)])) for m in models]
        total, previous = 0.0, BOS
        for token in [*target, EOS]:
            outs = [m.step(torch.tensor([previous]), st) for m, st in zip(models, states, strict=True)]
            total += math.log(sum(torch.softmax(o.logits, dim=-1)[0, token].item() for o in outs) / len(models))
            states, previous = [o.state for o in outs], token
        expected.append(total)
    batch = collate_seq2seq(pairs)
    assert_close(sequence_log_probs(models, batch), torch.tensor(expected, dtype=torch.float64))
    assert torch.equal(sequence_log_probs([models[0]], batch), sequence_log_probs(models[0], batch))
    with pytest.raises(ValueError, match=r"^sequence_log_probs needs at least one model$"):
        sequence_log_probs([], batch)


def test_weight_zero_keeps_the_search_order_and_scores_exactly():
    search, second = [-1.0, -1.5, -3.0], [-9.0, -0.1, -0.2]  # the second model disagrees completely
    assert rerank(search, second, weight=0.0) == (list(range(3)), search)
    assert rerank(search, None, weight=0.0) == (list(range(3)), search)


def test_rerank_orders_by_the_weighted_sum():
    search, second = [-1.0, -1.5, -3.0], [-9.0, -0.1, -0.2]
    for weight in (0.3, 0.5, 1.0):
        combined = [(1 - weight) * a + weight * b for a, b in zip(search, second, strict=True)]
        expected = sorted(range(3), key=lambda i: -combined[i])
        assert rerank(search, second, weight=weight) == (expected, [combined[i] for i in expected])
    assert rerank([-1.0, -2.0], [-2.0, -1.0], weight=0.5).order == [0, 1]  # a tie keeps the search's order
    assert rerank([-1.0, -math.inf], [-2.0, -1.0], weight=1.0) == ([0, 1], [-2.0, -math.inf])  # unfilled stays last


def test_rerank_refuses_a_weight_outside_0_1_or_missing_scores():
    with pytest.raises(ConfigError, match=r"rescore weight \(1.5\)"):
        rerank([-1.0], [-1.0], weight=1.5)
    with pytest.raises(ValueError, match="need 2 second scores"):
        rerank([-1.0, -2.0], [-1.0], weight=0.5)
