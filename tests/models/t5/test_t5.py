"""T5 against transformers' T5ForConditionalGeneration built from a config offline, and its own invariants.

Every parameter (layer norms and relative position tables included) is randomised so that no tensor can be mapped
wrongly unseen. Logits agree to 1e-5 in float32 both ways for v1.0 (ReLU, tied, scaled output) and v1.1 (gated
GELU, untied lm_head); greedy and beam tokens through seqlab.decoding equal generate(); cached decoding equals
teacher forcing; encoder padding changes nothing; bad folders fail in one line.
"""

import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from seqlab.decoding import beam_search, greedy_search
from seqlab.errors import CheckpointError, ConfigError
from seqlab.models import load_pretrained
from seqlab.models.t5 import T5, T5Config
from seqlab.models.t5.layers import relative_position_bucket

transformers = pytest.importorskip("transformers")

V = 23
ATOL = 1e-5
VERSIONS = {"v1.0": ("relu", True), "v1.1": ("gated-gelu", False)}


def hf_model(version, *, num_decoder_layers=3):
    feed_forward_proj, tie = VERSIONS[version]
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=V,
        d_model=16,
        d_kv=6,  # N * Dh = 18 != D
        d_ff=20,
        num_layers=2,
        num_decoder_layers=num_decoder_layers,
        num_heads=3,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=12,  # sequences below are longer: the logarithmic buckets are used
        feed_forward_proj=feed_forward_proj,
        tie_word_embeddings=tie,
        decoder_start_token_id=0,
    )
    model = transformers.T5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
        if not tie:
            model.lm_head.weight = torch.nn.Parameter(torch.randn(V, 16) * 0.5)
    return model


def batch(B=3, S=15, T=20, seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([S, 9, 4, 12][:B])
    src = torch.randint(2, V, (B, S), generator=g).masked_fill(torch.arange(S) >= lengths[:, None], 0)
    return src, lengths, torch.randint(2, V, (B, T), generator=g)


def hf_logits(model, src, lengths, tgt):
    keep = (torch.arange(src.shape[1]) < lengths[:, None]).long()
    with torch.no_grad():
        return model(input_ids=src, attention_mask=keep, decoder_input_ids=tgt).logits


@pytest.mark.parametrize("version", VERSIONS)
def test_from_hf_gives_the_same_logits(tmp_path, version):
    reference = hf_model(version)
    reference.save_pretrained(tmp_path)
    model = T5.from_hf(tmp_path)
    assert model.config.tie_word_embeddings is VERSIONS[version][1]
    assert model.config.feed_forward_proj == VERSIONS[version][0]
    src, lengths, tgt = batch()
    with torch.no_grad():
        ours = model(src, lengths, tgt).logits
    torch.testing.assert_close(ours, hf_logits(reference, src, lengths, tgt), atol=ATOL, rtol=0)


@pytest.mark.parametrize("version", VERSIONS)
def test_save_hf_loads_in_transformers_with_the_same_logits(tmp_path, version):
    feed_forward_proj, tie = VERSIONS[version]
    config = T5Config(
        vocab_size=V, d_model=16, d_kv=4, d_ff=24, num_layers=3, num_decoder_layers=2, num_heads=2,
        relative_attention_num_buckets=6, relative_attention_max_distance=10,
        feed_forward_proj=feed_forward_proj, tie_word_embeddings=tie,
    )  # fmt: skip
    torch.manual_seed(3)
    model = T5(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    model.save_hf(tmp_path)
    reference = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path).eval()
    src, lengths, tgt = batch(seed=4)
    with torch.no_grad():
        ours = model(src, lengths, tgt).logits
        torch.testing.assert_close(hf_logits(reference, src, lengths, tgt), ours, atol=ATOL, rtol=0)
        torch.testing.assert_close(T5.from_hf(tmp_path)(src, lengths, tgt).logits, ours, atol=ATOL, rtol=0)


def test_save_pretrained_round_trip_through_the_registry(tmp_path):
    model = T5(T5Config(vocab_size=V, d_model=8, d_kv=4, d_ff=8, num_layers=1, num_decoder_layers=1, num_heads=2))
    model.save_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path)
    assert isinstance(loaded, T5) and loaded.config == model.config
    src, lengths, tgt = batch(seed=5)
    torch.testing.assert_close(loaded(src, lengths, tgt).logits, model.eval()(src, lengths, tgt).logits)


def test_relative_position_bucket_equals_transformers():
    relative = torch.arange(-200, 201).view(1, -1)
    for bidirectional in (True, False):
        for num_buckets, max_distance in ((32, 128), (8, 12), (6, 10)):
            expected = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket(
                relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
            )
            ours = relative_position_bucket(
                relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
            )
            assert torch.equal(ours, expected)


@pytest.mark.parametrize("version", VERSIONS)
def test_greedy_and_beam_tokens_equal_hf_generate(tmp_path, version):
    # transformers 5.23's generate() sizes its cache by num_layers, so both stacks have the same depth here.
    reference = hf_model(version, num_decoder_layers=2)
    reference.save_pretrained(tmp_path)
    model, reference = T5.from_hf(tmp_path).double(), reference.double()  # float64: no near-ties flip a beam
    src, lengths, _ = batch()
    keep = (torch.arange(src.shape[1]) < lengths[:, None]).long()
    eos, max_new = 20, 12
    state = model.encode(src, lengths)
    start = torch.zeros(3, dtype=torch.long)
    searches = {
        1: greedy_search(model, state, start, eos_id=eos, max_length=max_new),
        3: beam_search(model, state, start, eos_id=eos, max_length=max_new, num_beams=3),
    }
    for num_beams, ours in searches.items():
        with torch.no_grad():
            theirs = reference.generate(
                src,
                attention_mask=keep,
                max_new_tokens=max_new,
                do_sample=False,
                num_beams=num_beams,
                early_stopping="never",
                eos_token_id=eos,
                pad_token_id=eos,
            )[:, 1:]  # without decoder_start_id
        assert ours.lengths.min() < max_new  # a row ends at EOS
        for b in range(3):
            n = int(ours.lengths[b, 0])
            assert ours.tokens[b, 0, :n].tolist() == theirs[b, :n].tolist()
            assert torch.all(theirs[b, n:] == eos)


def test_cached_decoding_equals_teacher_forcing(tmp_path):
    hf_model("v1.1").save_pretrained(tmp_path)
    model = T5.from_hf(tmp_path)
    src, lengths, tgt = batch()
    with torch.no_grad():
        full = model(src, lengths, tgt).logits  # (B, T, V)
        state = model.encode(src, lengths)
        for t in range(tgt.shape[1]):
            logits, state = model.step(tgt[:, t], state)
            torch.testing.assert_close(logits, full[:, t], atol=ATOL, rtol=0)
    assert state.caches[0].length == tgt.shape[1]


def test_encoder_padding_changes_nothing(tmp_path):
    hf_model("v1.0").save_pretrained(tmp_path)
    model = T5.from_hf(tmp_path)
    src, lengths, tgt = batch()
    with torch.no_grad():
        padded = model(src, lengths, tgt).logits
        for b in range(3):
            n = int(lengths[b])
            alone = model(src[b : b + 1, :n], lengths[b : b + 1], tgt[b : b + 1]).logits
            torch.testing.assert_close(padded[b : b + 1], alone, atol=ATOL, rtol=0)


def test_eval_disables_dropout_and_train_uses_it():
    model = T5(T5Config(vocab_size=V, d_model=8, d_kv=4, d_ff=8, num_layers=1, num_decoder_layers=1, num_heads=2))
    src, lengths, tgt = batch()
    model.eval()
    torch.testing.assert_close(model(src, lengths, tgt).logits, model(src, lengths, tgt).logits, atol=0, rtol=0)
    model.train()
    assert not torch.equal(model(src, lengths, tgt).logits, model(src, lengths, tgt).logits)


def test_another_architecture_fails_in_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(CheckpointError, match=r"model_type is 'bert', expected 't5'$"):
        T5.from_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "architectures": ["T5EncoderModel"]}))
    with pytest.raises(CheckpointError, match=r"architecture 'T5EncoderModel', expected 'T5ForConditionalGeneration'$"):
        T5.from_hf(tmp_path)


def test_missing_and_mis_shaped_tensors_are_named(tmp_path):
    hf_model("v1.0").save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    tensors = load_file(path)
    name = "decoder.block.1.layer.1.EncDecAttention.k.weight"
    save_file({k: v for k, v in tensors.items() if k != name}, path)
    with pytest.raises(CheckpointError, match=f"missing tensor {re.escape(name)}$"):
        T5.from_hf(tmp_path)
    save_file({**tensors, name: torch.zeros(18, 15)}, path)
    with pytest.raises(CheckpointError, match=re.escape(f"tensor {name} is [18, 15], the config needs [18, 16]")):
        T5.from_hf(tmp_path)
    save_file({**tensors, "lm_head.weight": torch.zeros(V, 16)}, path)
    with pytest.raises(CheckpointError, match=r"lm_head\.weight differs from shared\.weight"):
        T5.from_hf(tmp_path)


def test_config_rejects_bad_values_with_the_value_in_the_message():
    with pytest.raises(ConfigError, match=r"^feed_forward_proj \('gelu'\) must be one of 'relu', 'gated-gelu'$"):
        T5Config(feed_forward_proj="gelu")
    with pytest.raises(ConfigError, match=r"^relative_attention_max_distance \(16\) must exceed"):
        T5Config(relative_attention_num_buckets=32, relative_attention_max_distance=16)
    with pytest.raises(ConfigError, match=r"^eos_id \(40\) must be in \[0, 40\)$"):
        T5Config(vocab_size=40, eos_id=40)


@pytest.mark.parametrize(
    ("damage", "found"),
    [
        (lambda t: t.long(), "int64 values, expected floating point"),
        (lambda t: t.index_fill(0, torch.tensor([0]), float("nan")), "NaN or infinite values (a diverged model?)"),
    ],
)
def test_integer_or_nan_weights_are_refused_as_load_pretrained_does(tmp_path, damage, found):
    hf_model("v1.0").save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    tensors = load_file(weights)
    name = "decoder.block.0.layer.2.DenseReluDense.wi.weight"
    tensors[name] = damage(tensors[name])
    save_file(tensors, weights, metadata={"format": "pt"})
    message = f"{weights}: {name} holds {found}"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        T5.from_hf(tmp_path)
