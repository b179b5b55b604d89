"""exposure_bias: the teacher-forced loss is the training objective, the free-running accuracy is greedy decoding's
token agreement with the references."""

import pytest
import torch
import torch.nn.functional as F

from seqlab.analysis.exposure import ExposureBias, exposure_bias
from seqlab.data.batching import collate_seq2seq
from seqlab.decoding.greedy import greedy_search
from seqlab.errors import DataError
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq, TransformerSeq2SeqConfig
from seqlab.training.objectives import teacher_forcing_loss

V, PAD, BOS, EOS = 9, 0, 1, 2
# Targets: the source reversed and shifted, so a few Adam steps learn part of it.
SOURCES = [[3, 4, 5], [4], [6, 3, 7, 8], [5, 5, 6], [7, 3]]
PAIRS = [(src, [3 + (s + 1) % 6 for s in reversed(src)]) for src in SOURCES]


def rnn():
    torch.manual_seed(0)
    return RNNSeq2Seq(RNNSeq2SeqConfig(V, V, embedding_size=6, hidden_size=8, dropout=0.1, cell="gru"))


def transformer():
    torch.manual_seed(0)
    return TransformerSeq2Seq(TransformerSeq2SeqConfig(V, V, d_model=8, num_heads=2, d_ff=16, dropout=0.1))


def half_trained(make):
    """A model trained a little, so that some greedy tokens are right and some wrong."""
    model = make().double()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
    batch = collate_seq2seq(PAIRS)
    for _ in range(15):
        optimizer.zero_grad()
        teacher_forcing_loss(model, batch).loss.backward()
        optimizer.step()
    return model


def greedy_agreement(model, batches):
    """% of reference positions where greedy_search's token (EOS included, nothing after it) equals the reference."""
    correct = total = 0
    for batch in batches:
        T = batch.tgt_out.shape[1]
        start = torch.full((batch.src.shape[0],), BOS)
        out = greedy_search(model, model.encode(batch.src, batch.src_lengths), start, eos_id=EOS, max_length=T)
        tokens, lengths = out.tokens[:, 0], out.lengths[:, 0]
        for b in range(tokens.shape[0]):
            for t in range(int(batch.tgt_lengths[b])):
                correct += int(t < int(lengths[b]) and int(tokens[b, t]) == int(batch.tgt_out[b, t]))
                total += 1
    return 100.0 * correct / total


@pytest.mark.parametrize("make", [rnn, transformer])
def test_teacher_forced_loss_is_the_training_loss_and_free_running_accuracy_is_greedy_agreement(make):
    model = half_trained(make)
    batches = [collate_seq2seq(PAIRS[:3]), collate_seq2seq(PAIRS[3:])]
    result = exposure_bias(model, batches, pad_id=PAD, eos_id=EOS)
    assert isinstance(result, ExposureBias)
    assert model.training  # mode restored
    model.eval()
    with torch.no_grad():
        whole = teacher_forcing_loss(model, collate_seq2seq(PAIRS))
        forced = [model(b.src, b.src_lengths, b.tgt_in).logits.argmax(-1) == b.tgt_out for b in batches]
        agreement = greedy_agreement(model, batches)
    assert result.num_tokens == whole.num_tokens == sum(len(y) + 1 for _, y in PAIRS)
    assert result.teacher_forced_loss == pytest.approx(whole.loss.item(), rel=1e-12)
    tf_correct = sum(int((f & (b.tgt_out != PAD)).sum()) for f, b in zip(forced, batches, strict=True))
    assert result.teacher_forced_accuracy == pytest.approx(100.0 * tf_correct / result.num_tokens)
    assert result.free_running_accuracy == pytest.approx(agreement)
    assert 0.0 < result.free_running_accuracy < 100.0
    assert result.loss_gap == result.free_running_loss - result.teacher_forced_loss


def test_free_running_loss_is_the_nll_of_the_references_after_the_greedy_prefixes():
    model = half_trained(rnn).eval()
    batch = collate_seq2seq(PAIRS)
    result = exposure_bias(model, [batch], pad_id=PAD, eos_id=EOS)
    nll, tokens = 0.0, 0
    with torch.no_grad():
        for src, y in PAIRS:
            one = collate_seq2seq([(src, y)])
            start = torch.full((1,), BOS)
            # y^_<t: the greedy decode continued past EOS, fed back one token at a time
            state, token = model.encode(one.src, one.src_lengths), start
            for t in range(len(y) + 1):
                logits, state = model.step(token, state)
                nll -= F.log_softmax(logits, dim=-1)[0, y[t] if t < len(y) else EOS].item()
                token = logits.argmax(dim=-1)
                tokens += 1
    assert result.free_running_loss == pytest.approx(nll / tokens, rel=1e-12)


def test_no_target_tokens_is_a_data_error():
    with pytest.raises(DataError, match=r"^no target tokens to measure exposure bias on$"):
        exposure_bias(rnn(), [], pad_id=PAD, eos_id=EOS)
