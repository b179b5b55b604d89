"""Next-sentence pairs and the MLM + NSP loss: half the pairs are IsNext, B follows A exactly in those and never in
the others, segment ids mark [CLS] A [SEP] as 0 and B [SEP] as 1; the loss equals transformers' BertForPreTraining
loss (MLM cross-entropy + NSP cross-entropy) on the same weights and batch."""

import pytest
import torch
import transformers

from seqlab.models import BertConfig, BertForPreTraining
from seqlab.training.masked_lm import mask_tokens
from seqlab.training.next_sentence import IS_NEXT, PreTrainingBatch, pretraining_loss, sentence_pairs

CLS, SEP = 2, 3


def test_pair_statistics_and_segment_ids():
    ids = torch.arange(10, 3010)  # each piece tells its position: B follows A iff its first piece is A's last + 1
    T, S = 12, 10_000
    a, b = (T - 3) // 2, T - 3 - (T - 3) // 2
    generator = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(ids) - (T - 3) + 1, (S,), generator=generator)
    pairs = sentence_pairs(ids, starts, T, cls_id=CLS, sep_id=SEP, generator=generator)
    x = pairs.input_ids
    assert x.shape == (S, T) and pairs.token_type_ids.shape == (S, T)
    assert (x[:, 0] == CLS).all() and (x[:, a + 1] == SEP).all() and (x[:, -1] == SEP).all()
    assert torch.equal(x[:, 1 : a + 1], ids[starts[:, None] + torch.arange(a)])  # A is the window at its start
    segment_b = x[:, a + 2 : -1]
    assert (segment_b.diff(dim=1) == 1).all() and segment_b.shape[1] == b  # B is a window of the text
    is_next = pairs.next_sentence_labels == IS_NEXT
    assert abs(is_next.float().mean().item() - 0.5) < 0.02
    follows = segment_b[:, 0] == x[:, a] + 1
    assert torch.equal(follows, is_next)
    assert torch.equal(pairs.token_type_ids, (torch.arange(T) >= a + 2).long().expand(S, T))
    with pytest.raises(ValueError, match="needs length >= 5"):
        sentence_pairs(ids, starts, 4, cls_id=CLS, sep_id=SEP, generator=generator)


def test_the_loss_equals_transformers_mlm_plus_nsp_cross_entropy(tmp_path):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_positions=16, dropout=0.0)
    model = BertForPreTraining(config).eval()
    model.save_hf(tmp_path)
    reference = transformers.BertForPreTraining.from_pretrained(tmp_path).eval()
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 30, (200,), generator=generator)
    pairs = sentence_pairs(ids, torch.arange(0, 180, 20), 12, cls_id=CLS, sep_id=SEP, generator=generator)
    masked = mask_tokens(pairs.input_ids, pairs.input_ids >= 5, mask_id=4, vocab_size=30, generator=generator)
    batch = PreTrainingBatch(masked.input_ids, masked.labels, pairs.token_type_ids, pairs.next_sentence_labels)
    with torch.no_grad():
        ours = pretraining_loss(model, batch)
        theirs = reference(
            batch.input_ids,
            token_type_ids=batch.token_type_ids,
            labels=batch.labels,
            next_sentence_label=batch.next_sentence_labels,
        )
    assert ours.output.loss.item() == pytest.approx(theirs.loss.item(), abs=1e-5)
    nsp = torch.nn.functional.cross_entropy(theirs.seq_relationship_logits, batch.next_sentence_labels)
    assert ours.nsp_loss.item() == pytest.approx(nsp.item(), abs=1e-5)
    assert ours.output.num_tokens == int((batch.labels != -100).sum())
