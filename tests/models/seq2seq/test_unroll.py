"""unroll and mix_inputs: teacher forcing at eps = 1, greedy decoding at eps = 0, and the coins in between."""

import pytest
import torch
from torch.testing import assert_close

from seqlab.decoding.greedy import greedy_search
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq, TransformerSeq2SeqConfig
from seqlab.models.seq2seq.unroll import mix_inputs, unroll

V_SRC, V_TGT, BOS, EOS = 11, 9, 1, 2
LENGTHS = [3, 5, 2]


def rnn_model(placement="luong"):
    torch.manual_seed(0)
    config = RNNSeq2SeqConfig(V_SRC, V_TGT, embedding_size=5, hidden_size=6, dropout=0.0, attention_placement=placement)
    return RNNSeq2Seq(config).double().eval()


def batch(T=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(LENGTHS)
    src = torch.randint(3, V_SRC, (len(LENGTHS), max(LENGTHS)), generator=g)
    tgt_in = torch.randint(3, V_TGT, (len(LENGTHS), T), generator=g)
    tgt_in[:, 0] = BOS
    return src, lengths, tgt_in


@pytest.mark.parametrize("placement", ["luong", "bahdanau"])
def test_unroll_with_probability_one_is_teacher_forcing(placement):
    model = rnn_model(placement)
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        out = unroll(model, model.encode(src, lengths), tgt_in, teacher_forcing=1.0)
        expected = model(src, lengths, tgt_in).logits
    assert torch.equal(out.inputs, tgt_in)
    assert_close(out.logits, expected)


@pytest.mark.parametrize("placement", ["luong", "luong_input_feeding"])
def test_unroll_with_probability_zero_is_greedy_decoding(placement):
    """Free running feeds the greedy tokens: inputs[:, 1:] == greedy_search's tokens while no row has ended, and
    the logits are the teacher-forced logits of those very inputs."""
    model = rnn_model(placement)
    src, lengths, tgt_in = batch()
    T = tgt_in.shape[1]
    with torch.no_grad():
        out = unroll(model, model.encode(src, lengths), tgt_in, teacher_forcing=0.0)
        start = torch.full((len(LENGTHS),), BOS)
        greedy = greedy_search(model, model.encode(src, lengths), start, eos_id=EOS, max_length=T)
        again = model(src, lengths, out.inputs).logits
    predicted = out.logits.argmax(dim=-1)  # (B, T)
    assert torch.equal(out.inputs[:, 1:], predicted[:, :-1])
    greedy_tokens = greedy.tokens[:, 0]  # (B, T')
    for b in range(len(LENGTHS)):
        n = int(greedy.lengths[b, 0])
        assert torch.equal(greedy_tokens[b, :n], predicted[b, :n])
    assert_close(again, out.logits)


def test_unroll_mixes_gold_and_predictions_by_the_coins():
    model = rnn_model()
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        out = unroll(
            model, model.encode(src, lengths), tgt_in, teacher_forcing=0.5, generator=torch.Generator().manual_seed(3)
        )
    coins = torch.rand(tgt_in.shape, generator=torch.Generator().manual_seed(3)) < 0.5
    coins[:, 0] = True
    predicted = torch.cat([tgt_in[:, :1], out.logits[:, :-1].argmax(dim=-1)], dim=1)
    assert torch.equal(out.inputs, torch.where(coins, tgt_in, predicted))
    assert 0 < int(coins[:, 1:].sum()) < coins[:, 1:].numel()


def test_mix_inputs_two_pass_extremes():
    torch.manual_seed(0)
    model = (
        TransformerSeq2Seq(TransformerSeq2SeqConfig(V_SRC, V_TGT, d_model=8, num_heads=2, d_ff=16, dropout=0.0))
        .double()
        .eval()
    )
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        logits = model(src, lengths, tgt_in).logits
    assert torch.equal(mix_inputs(tgt_in, logits, teacher_forcing=1.0), tgt_in)
    free = mix_inputs(tgt_in, logits, teacher_forcing=0.0)
    assert torch.equal(free[:, 0], tgt_in[:, 0])
    assert torch.equal(free[:, 1:], logits[:, :-1].argmax(dim=-1))


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_teacher_forcing_outside_the_unit_interval_is_refused(value):
    model = rnn_model()
    src, lengths, tgt_in = batch()
    message = rf"^teacher_forcing \({value}\) must be a finite number >= 0.0 and <= 1.0$"
    with pytest.raises(ValueError, match=message):
        unroll(model, model.encode(src, lengths), tgt_in, teacher_forcing=value)
    with pytest.raises(ValueError, match=message):
        mix_inputs(tgt_in, torch.zeros(*tgt_in.shape, V_TGT), teacher_forcing=value)
