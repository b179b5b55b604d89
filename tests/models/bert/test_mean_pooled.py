"""BertForMeanPooledClassification: its logits are the classifier applied to the mean of transformers' BertModel
hidden states at the real tokens (an independent reference), and pads change nothing."""

import pytest
import torch
import transformers

import seqlab.models.bert as bert_package
from seqlab.models import BertConfig, BertForMeanPooledClassification, ClassifierOutput

CONFIG = BertConfig(vocab_size=40, d_model=32, num_heads=2, num_layers=2, d_ff=64, max_positions=16, pooler=False)


def test_logits_are_the_classifier_of_transformers_mean_over_real_tokens(tmp_path):
    torch.manual_seed(0)
    model = BertForMeanPooledClassification(BertConfig(**{**CONFIG.__dict__, "num_labels": 3})).eval()
    model.save_hf(tmp_path)
    reference = transformers.BertModel.from_pretrained(tmp_path, add_pooling_layer=False).eval()
    input_ids = torch.randint(5, 40, (3, 7))
    lengths = torch.tensor([7, 4, 2])
    keep_mask = torch.arange(7) < lengths[:, None]  # (B, T)
    input_ids[~keep_mask] = 0
    with torch.no_grad():
        h = reference(input_ids, attention_mask=keep_mask.long()).last_hidden_state  # (B, T, D)
        expected = torch.stack([model.classifier(h[b, : lengths[b]].mean(0)) for b in range(3)])
        logits = model(input_ids, keep_mask=keep_mask).logits
    assert logits.shape == (3, 3)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # the shortest row alone, without pads, gives the same logits
        alone = model(input_ids[2:, :2]).logits
    torch.testing.assert_close(alone, logits[2:], atol=1e-5, rtol=1e-5)


def test_the_bert_heads_return_the_classifier_output_of_every_classifier_and_the_old_name_warns():
    model = BertForMeanPooledClassification(BertConfig(vocab_size=10, d_model=8, num_heads=2, num_layers=1, d_ff=16))
    out = model(torch.tensor([[1, 4, 2]]))
    assert isinstance(out, ClassifierOutput) and out.attention is None and out.logits.shape == (1, 2)
    with pytest.warns(FutureWarning, match="ClassificationOutput is renamed seqlab.models.ClassifierOutput"):
        assert bert_package.ClassificationOutput is ClassifierOutput
