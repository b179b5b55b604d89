"""GPT.from_hf / GPT.save_hf against transformers' GPT2LMHeadModel, built from a config offline.

Every parameter (biases and layer norms included) is randomised so that no tensor can be mapped wrongly unseen.
Logits agree to 1e-5 in float32 both ways; greedy tokens equal ``generate(do_sample=False)`` and beam tokens through
``seqlab.decoding.generate`` equal ``generate(num_beams=K)``, left-padded batches included; bad folders fail in one
line naming the tensor or field.
"""

import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from seqlab.decoding import generate
from seqlab.errors import CheckpointError, ConfigError
from seqlab.models import GPT, GPTConfig

transformers = pytest.importorskip("transformers")

V = 31
ATOL = 1e-5


def hf_model(*, tie=True, n_inner=None):
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=V,
        n_positions=24,
        n_embd=16,
        n_layer=2,
        n_head=4,
        n_inner=n_inner,
        tie_word_embeddings=tie,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return model


def tokens(B, T, seed=1):
    return torch.randint(1, V, (B, T), generator=torch.Generator().manual_seed(seed))


def max_diff(a, b):
    return (a - b).abs().max().item()


@pytest.mark.parametrize("tie", [True, False])
def test_from_hf_gives_the_same_logits(tmp_path, tie):
    reference = hf_model(tie=tie, n_inner=24)
    reference.save_pretrained(tmp_path)
    model = GPT.from_hf(tmp_path)
    assert model.config.tie_embeddings is tie and model.config.inner_size == 24
    x = tokens(2, 10)
    with torch.no_grad():
        assert max_diff(model(x).logits, reference(x).logits) <= ATOL


@pytest.mark.parametrize("tie", [True, False])
def test_save_hf_writes_a_folder_transformers_loads_with_the_same_logits(tmp_path, tie):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, context_length=24, d_model=16, num_heads=4, num_layers=2, tie_embeddings=tie))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    model.eval().save_hf(tmp_path)
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    x = tokens(2, 10)
    with torch.no_grad():
        assert max_diff(loaded(x).logits, model(x).logits) <= ATOL
    assert GPT.from_hf(tmp_path).config == model.config


def greedy(model, input_ids, keep_mask, new_tokens):
    out = model.prefill(input_ids, keep_mask)
    chosen = []
    for _ in range(new_tokens):
        token = out.logits.argmax(dim=-1)  # (B,)
        chosen.append(token)
        out = model.step(token, out.state)
    return torch.stack(chosen, dim=1)  # (B, N)


def test_greedy_tokens_equal_hf_generate(tmp_path):
    reference = hf_model()
    reference.save_pretrained(tmp_path)
    model = GPT.from_hf(tmp_path)
    x = tokens(1, 5)
    with torch.no_grad():
        expected = reference.generate(x, max_new_tokens=12, do_sample=False)[:, 5:]
        assert torch.equal(greedy(model, x, None, 12), expected)


def test_left_padded_greedy_tokens_equal_hf_generate_with_an_attention_mask(tmp_path):
    reference = hf_model()
    reference.save_pretrained(tmp_path)
    model = GPT.from_hf(tmp_path)
    x = tokens(3, 6)
    keep_mask = torch.ones(3, 6, dtype=torch.bool)
    keep_mask[1, :4] = False
    keep_mask[2, :1] = False
    x = x.masked_fill(~keep_mask, 0)
    with torch.no_grad():
        expected = reference.generate(x, attention_mask=keep_mask.long(), max_new_tokens=8, do_sample=False)[:, 6:]
        assert torch.equal(greedy(model, x, keep_mask, 8), expected)


def test_a_missing_tensor_is_named_in_one_line(tmp_path):
    hf_model().save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    tensors = load_file(weights)
    del tensors["transformer.h.1.mlp.c_fc.bias"]
    save_file(tensors, weights, metadata={"format": "pt"})
    message = f"{weights}: missing tensor transformer.h.1.mlp.c_fc.bias"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        GPT.from_hf(tmp_path)


def test_a_mis_shaped_tensor_is_named_in_one_line(tmp_path):
    hf_model().save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    tensors = load_file(weights)
    tensors["transformer.h.0.attn.c_attn.weight"] = tensors["transformer.h.0.attn.c_attn.weight"].T.contiguous()
    save_file(tensors, weights, metadata={"format": "pt"})
    message = f"{weights}: tensor transformer.h.0.attn.c_attn.weight is [48, 16], the config needs [16, 48]"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        GPT.from_hf(tmp_path)


@pytest.mark.parametrize(
    ("field", "value", "supported"),
    [
        ("activation_function", "silu", "'gelu_new', 'gelu_pytorch_tanh', 'gelu'"),
        ("scale_attn_by_inverse_layer_idx", True, "False"),
        ("reorder_and_upcast_attn", True, "False"),
    ],
)
def test_an_unsupported_config_field_is_named_in_one_line(tmp_path, field, value, supported):
    hf_model().save_pretrained(tmp_path)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), field: value}))
    message = f"{config_path}: unsupported {field} {value!r} (supported: {supported})"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        GPT.from_hf(tmp_path)


def test_save_hf_refuses_what_gpt2_cannot_express(tmp_path):
    model = GPT(GPTConfig(vocab_size=V, context_length=8, d_model=16, num_heads=2, num_layers=1, positional="rotary"))
    message = (
        "a GPT-2 folder needs learned positions, biases and a GELU activation; "
        "got positional 'rotary', bias True, activation 'gelu_tanh'"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        model.save_hf(tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("num_beams", [3, 5])
def test_beam_search_through_generate_equals_hf_generate(tmp_path, num_beams):
    reference = hf_model()
    reference.save_pretrained(tmp_path)
    model, reference = GPT.from_hf(tmp_path).double(), reference.double()  # float64: no near-ties flip a beam
    x = tokens(3, 6, seed=2)
    keep_mask = torch.ones(3, 6, dtype=torch.bool)
    keep_mask[1, :3] = False
    x = x.masked_fill(~keep_mask, 0)
    eos = 6
    ours = generate(model, x, keep_mask=keep_mask, max_new_tokens=10, num_beams=num_beams, eos_id=eos)
    with torch.no_grad():
        theirs = reference.generate(
            x,
            attention_mask=keep_mask.long(),
            max_new_tokens=10,
            do_sample=False,
            num_beams=num_beams,
            early_stopping="never",
            eos_token_id=eos,
            pad_token_id=eos,
        )
    assert ours.lengths.min() < 10  # a row ends at EOS
    for b in range(3):
        n = int(ours.lengths[b])
        assert ours.tokens[b, 6 : 6 + n].tolist() == theirs[b, 6 : 6 + n].tolist()
        assert torch.all(theirs[b, 6 + n :] == eos)


@pytest.mark.parametrize(
    ("damage", "found"),
    [
        (lambda t: t.long(), "int64 values, expected floating point"),
        (lambda t: t.index_fill(0, torch.tensor([0]), float("nan")), "NaN or infinite values (a diverged model?)"),
    ],
)
def test_integer_or_nan_weights_are_refused_as_load_pretrained_does(tmp_path, damage, found):
    hf_model().save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    tensors = load_file(weights)
    tensors["transformer.h.0.mlp.c_fc.weight"] = damage(tensors["transformer.h.0.mlp.c_fc.weight"])
    save_file(tensors, weights, metadata={"format": "pt"})
    message = f"{weights}: transformer.h.0.mlp.c_fc.weight holds {found}"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        GPT.from_hf(tmp_path)
