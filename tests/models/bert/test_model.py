"""Bert's own invariants: eval() disables dropout, inputs past max_positions and bad masks are one line, the MLM
decoder is tied to the word embeddings, and a tiny BertForMaskedLM overfits one masked batch (gradients reach every
part through the tied head)."""

import re

import pytest
import torch

from seqlab.models import Bert, BertConfig, BertForMaskedLM, BertForPreTraining
from seqlab.training.masked_lm import mask_tokens, masked_lm_loss

CONFIG = BertConfig(vocab_size=40, d_model=32, num_heads=2, num_layers=1, d_ff=64, max_positions=16, dropout=0.3)


def test_eval_disables_dropout_and_train_enables_it():
    torch.manual_seed(0)
    model = Bert(CONFIG)
    x = torch.randint(1, 40, (2, 10))
    model.eval()
    assert torch.equal(model(x).last_hidden_state, model(x).last_hidden_state)
    model.train()
    assert not torch.equal(model(x).last_hidden_state, model(x).last_hidden_state)


def test_bad_inputs_are_one_line():
    model = Bert(CONFIG)
    with pytest.raises(ValueError, match=r"^an input of 17 tokens is longer than the 16 positions of this BERT$"):
        model(torch.ones(1, 17, dtype=torch.long))
    message = "keep_mask must be torch.bool (B, T) = (1, 4), got torch.int64 (1, 4)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        model(torch.ones(1, 4, dtype=torch.long), keep_mask=torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"needs a pooler|config.pooler must be True"):
        BertForPreTraining(BertConfig(vocab_size=40, d_model=32, num_heads=2, pooler=False))


def test_the_mlm_decoder_is_the_word_embedding():
    model = BertForMaskedLM(CONFIG)
    names = {name for name, _ in model.named_parameters()}
    assert not any("decoder" in name for name in names)
    with torch.no_grad():
        model.bert.word_embeddings.weight[7] += 1.0
    h = torch.randn(3, 32)
    transformed = model.mlm_head.norm(torch.nn.functional.gelu(model.mlm_head.dense(h)))
    expected = transformed @ model.bert.word_embeddings.weight.T
    torch.testing.assert_close(model.mlm_head(h, model.bert.word_embeddings.weight), expected + model.mlm_head.bias)


def test_a_tiny_masked_lm_overfits_one_batch():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=40, d_model=32, num_heads=2, num_layers=1, d_ff=64, max_positions=16, dropout=0.0)
    model = BertForMaskedLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randint(5, 40, (8, 16))
    batch = mask_tokens(x, x > 4, mask_id=4, vocab_size=40, generator=torch.Generator().manual_seed(0), mask_prob=0.3)
    first = masked_lm_loss(model, batch)
    for _ in range(100):
        result = masked_lm_loss(model, batch)
        result.output.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert first.correct < 0.2 * first.output.num_tokens
    assert result.correct == result.output.num_tokens
