import pytest
import torch
from torch.testing import assert_close

from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.ensemble import EnsembleStepModel
from seqlab.decoding.greedy import greedy_search
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq, TransformerSeq2SeqConfig

BOS, EOS = 1, 2


def _rnn(seed, *, tgt_vocab_size=9):
    torch.manual_seed(seed)
    config = RNNSeq2SeqConfig(8, tgt_vocab_size, embedding_size=6, hidden_size=8, encoder_layers=1, dropout=0.0)
    return RNNSeq2Seq(config).double().eval()


def _transformer(seed):
    torch.manual_seed(seed)
    config = TransformerSeq2SeqConfig(8, 9, d_model=8, num_heads=2, d_ff=16, encoder_layers=1, decoder_layers=1)
    return TransformerSeq2Seq(config).double().eval()


def _source():
    src = torch.tensor([[3, 4, 5, 6], [7, 3, 0, 0], [5, 0, 0, 0]])
    return src, torch.tensor([4, 2, 1])


def _decode(model, *, num_beams):
    src, lengths = _source()
    start = torch.full((3,), BOS)
    if num_beams == 1:
        return greedy_search(model, model.encode(src, lengths), start, eos_id=EOS, max_length=7)
    return beam_search(
        model, model.encode(src, lengths), start, eos_id=EOS, max_length=7, num_beams=num_beams, num_return_sequences=3
    )


@pytest.mark.parametrize("combine", ["mean", "log_linear"])
@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("members", [1, 2])
def test_an_ensemble_of_copies_of_one_model_decodes_as_the_model(members, num_beams, combine):
    model = _rnn(0)
    alone = _decode(model, num_beams=num_beams)
    together = _decode(EnsembleStepModel([model] * members, combine=combine), num_beams=num_beams)
    assert torch.equal(together.tokens, alone.tokens)
    assert torch.equal(together.lengths, alone.lengths)
    assert_close(together.scores, alone.scores)
    assert_close(together.log_probs, alone.log_probs)


@pytest.mark.parametrize("combine", ["mean", "log_linear"])
def test_step_combines_the_members_distributions_as_the_formula(combine):
    members = [_rnn(0), _transformer(1), _rnn(2)]
    ensemble = EnsembleStepModel(members, combine=combine)
    src, lengths = _source()
    tokens = torch.tensor([BOS, 4, 5])
    logits, _ = ensemble.step(tokens, ensemble.encode(src, lengths))
    p = [torch.softmax(m.step(tokens, m.encode(src, lengths)).logits, dim=-1) for m in members]  # each (B, V)
    if combine == "mean":
        expected = torch.log(sum(p) / 3)
    else:
        geometric = (p[0] * p[1] * p[2]) ** (1 / 3)
        expected = torch.log(geometric / geometric.sum(dim=-1, keepdim=True))
    assert_close(logits, expected)
    assert_close(logits.exp().sum(dim=-1), torch.ones(3, dtype=torch.float64))


def test_reorder_state_reorders_every_member_and_decoding_follows_the_beams():
    members = [_rnn(0), _transformer(1)]
    ensemble = EnsembleStepModel(members)
    src, lengths = _source()
    index = torch.tensor([2, 0, 0])
    reordered = ensemble.reorder_state(ensemble.encode(src, lengths), index)
    direct = ensemble.encode(src[index], lengths[index])
    tokens = torch.tensor([BOS, 3, 4])
    assert_close(ensemble.step(tokens, reordered).logits, ensemble.step(tokens, direct).logits)


def test_an_ensemble_decodes_with_the_mixture_of_its_members():
    """Greedy tokens of the ensemble follow argmax_v of the mean probability, step by step."""
    members = [_rnn(0), _rnn(3)]
    out = _decode(EnsembleStepModel(members), num_beams=1)
    src, lengths = _source()
    states = [m.encode(src, lengths) for m in members]
    tokens, total = torch.full((3,), BOS), torch.zeros(3, dtype=torch.float64)
    for t in range(out.tokens.shape[2]):
        steps = [m.step(tokens, s) for m, s in zip(members, states, strict=True)]
        states = [s.state for s in steps]
        p = sum(torch.softmax(s.logits, dim=-1) for s in steps) / 2
        live = t < out.lengths[:, 0]
        tokens = torch.where(live, p.argmax(dim=-1), EOS)
        total += torch.where(live, p.gather(1, tokens.unsqueeze(1)).squeeze(1).log(), 0.0)
        assert torch.equal(out.tokens[:, 0, t], tokens)
    assert_close(out.log_probs[:, 0], total)


def test_members_with_different_vocabularies_are_refused_in_one_line():
    ensemble = EnsembleStepModel([_rnn(0), _rnn(1, tgt_vocab_size=10)])
    src, lengths = _source()
    with pytest.raises(ValueError, match=r"^ensemble members' logits differ in shape: \[\(3, 9\), \(3, 10\)\]$"):
        ensemble.step(torch.full((3,), BOS), ensemble.encode(src, lengths))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="at least one member"):
        EnsembleStepModel([])
    with pytest.raises(ValueError, match="combine"):
        EnsembleStepModel([_rnn(0)], combine="max")
