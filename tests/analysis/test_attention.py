"""Attention maps: rows are distributions and equal the models' own weights or a hand computation from Q and K."""

import math

import pytest
import torch

from seqlab.analysis.attention import attention_maps, row_sums_error
from seqlab.errors import CheckpointError
from seqlab.models import (
    GPT,
    GPTConfig,
    RNNSeq2Seq,
    RNNSeq2SeqConfig,
    TransformerSeq2Seq,
    TransformerSeq2SeqConfig,
)

SOURCE, TARGET = [3, 4, 5, 6, 7], [1, 5, 6, 3]


def hand_attention(module, query, key, causal):
    """softmax(Q K^T / sqrt(Dh)) per head from the module's projections, (N, T, S)."""
    N, Dh = module.num_heads, module.head_dim
    q = module.q_proj(query)[0].view(-1, N, Dh).transpose(0, 1)  # (N, T, Dh)
    k = module.k_proj(key)[0].view(-1, N, Dh).transpose(0, 1)  # (N, S, Dh)
    scores = q @ k.transpose(1, 2) / math.sqrt(Dh)
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(dim=-1)


def inputs_of(model, run):
    """The (query, key) each MultiHeadAttention received during run(), by module name."""
    seen, handles = {}, []

    def remember(name):
        def hook(module, args, kwargs):
            seen[name] = (args[0], args[1] if len(args) > 1 else kwargs.get("key"))

        return hook

    for name, module in model.named_modules():
        if type(module).__name__ == "MultiHeadAttention":
            handles.append(module.register_forward_pre_hook(remember(name), with_kwargs=True))
    with torch.no_grad():
        run()
    for handle in handles:
        handle.remove()
    return seen


def test_transformer_maps_equal_a_hand_computation_and_the_models_cross_weights():
    torch.manual_seed(0)
    config = TransformerSeq2SeqConfig(
        src_vocab_size=9, tgt_vocab_size=9, d_model=8, num_heads=2, d_ff=16, encoder_layers=2, decoder_layers=2,
        positional="sinusoidal",
    )  # fmt: skip
    model = TransformerSeq2Seq(config).eval()
    maps = attention_maps(model, SOURCE, TARGET)
    assert len(maps) == 3 * 2 * 2  # (encoder self, decoder self, cross) x 2 layers x 2 heads
    assert row_sums_error(maps) < 1e-6
    src, tgt, lengths = torch.tensor([SOURCE]), torch.tensor([TARGET]), torch.tensor([len(SOURCE)])
    seen = inputs_of(model, lambda: model(src, lengths, tgt))
    for name in ("encoder.layers.0.self_attn", "encoder.layers.1.self_attn", "decoder.layers.1.self_attn"):
        query, _ = seen[name]
        with torch.no_grad():
            expected = hand_attention(model.get_submodule(name), query, query, causal=name.startswith("decoder"))
        got = torch.stack([m.weights for m in maps if m.module == name])
        assert {m.kind for m in maps if m.module == name} == {"self"}
        torch.testing.assert_close(got, expected)
    with torch.no_grad():
        own = model(src, lengths, tgt, need_weights=True).attention[0]  # last layer's cross weights, head mean
    last_cross = torch.stack([m.weights for m in maps if m.module == "decoder.layers.1.cross_attn"])
    assert {m.kind for m in maps if m.module == "decoder.layers.1.cross_attn"} == {"cross"}
    torch.testing.assert_close(last_cross.mean(dim=0), own)
    assert all(not module._forward_hooks for module in model.modules())  # the hooks are gone afterwards


def test_gpt_maps_are_causal_and_equal_a_hand_computation():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=9, context_length=16, d_model=8, num_heads=2, num_layers=2)).eval()
    ids = [3, 1, 4, 1, 5, 8]
    maps = attention_maps(model, ids)
    assert len(maps) == 2 * 2 and {m.kind for m in maps} == {"self"}
    for m in maps:
        assert m.weights.shape == (6, 6)
        assert (m.weights.triu(1) == 0).all()
    seen = inputs_of(model, lambda: model(torch.tensor([ids])))
    name = maps[0].module
    expected = hand_attention(model.get_submodule(name), seen[name][0], seen[name][0], causal=True)
    torch.testing.assert_close(torch.stack([m.weights for m in maps if m.module == name]), expected)


def test_rnn_alignment_is_the_models_own_and_rows_sum_to_one():
    torch.manual_seed(0)
    config = RNNSeq2SeqConfig(src_vocab_size=9, tgt_vocab_size=9, embedding_size=4, hidden_size=6, dropout=0.0)
    model = RNNSeq2Seq(config)
    (alignment,) = attention_maps(model, SOURCE, TARGET)
    with torch.no_grad():
        own = model(torch.tensor([SOURCE]), torch.tensor([len(SOURCE)]), torch.tensor([TARGET])).attention[0]
    torch.testing.assert_close(alignment.weights, own)
    assert alignment.weights.shape == (len(TARGET), len(SOURCE))
    torch.testing.assert_close(alignment.weights.sum(dim=1), torch.ones(len(TARGET)))


def test_models_without_attention_weights_are_refused():
    fixed = RNNSeq2Seq(
        RNNSeq2SeqConfig(src_vocab_size=9, tgt_vocab_size=9, embedding_size=4, hidden_size=6, attention="none")
    )
    with pytest.raises(CheckpointError, match="no attention"):
        attention_maps(fixed, SOURCE, TARGET)
    linear = TransformerSeq2Seq(
        TransformerSeq2SeqConfig(
            src_vocab_size=9, tgt_vocab_size=9, d_model=8, num_heads=2, d_ff=16, encoder_layers=1, decoder_layers=1,
            attention_kind="linear", dropout=0.0,
        )
    )  # fmt: skip
    with pytest.raises(CheckpointError, match="linear attention"):
        attention_maps(linear, SOURCE, TARGET)
    with pytest.raises(CheckpointError, match="need an RNNSeq2Seq"):
        attention_maps(torch.nn.Linear(2, 2), SOURCE)
