import dataclasses
import json
import re

import pytest
import torch
from safetensors import safe_open
from torch import nn
from torch.testing import assert_close

from seqlab.errors import CheckpointError, ConfigError
from seqlab.models import GPT, GPTConfig, load_pretrained
from seqlab.models.pretrained import _NoInitialisation
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig

CONFIG = RNNSeq2SeqConfig(11, 9, embedding_size=5, hidden_size=8, encoder_layers=2, decoder_layers=2, dropout=0.3)


def make_model(config=CONFIG, seed=0):
    torch.manual_seed(seed)
    return RNNSeq2Seq(config)


def batch():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 11, (3, 5), generator=g)
    tgt_in = torch.randint(3, 9, (3, 4), generator=g)
    return src, torch.tensor([3, 5, 2]), tgt_in


@pytest.fixture
def checkpoint(tmp_path):
    """A saved model's directory, config.json path, weights path and config payload."""
    directory = tmp_path / "ckpt"
    make_model().save_pretrained(directory)
    config_path = directory / "config.json"
    return directory, config_path, directory / "model.safetensors", json.loads(config_path.read_text())


def expect_error(directory, message):
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        RNNSeq2Seq.from_pretrained(directory)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"cell": "gru", "attention": "dot"}, {"cell": "rnn", "attention": "none", "bidirectional": False}],
)
def test_round_trip_restores_config_weights_and_outputs(tmp_path, overrides):
    model = make_model(dataclasses.replace(CONFIG, **overrides))
    directory = tmp_path / "nested" / "ckpt"  # parents are created
    model.save_pretrained(directory)
    assert sorted(p.name for p in directory.iterdir()) == ["config.json", "model.safetensors"]
    payload = json.loads((directory / "config.json").read_text())
    assert payload == {"model_type": "rnn_seq2seq", "config": dataclasses.asdict(model.config)}
    with safe_open(directory / "model.safetensors", framework="pt") as f:
        assert sorted(f.keys()) == sorted(model.state_dict())

    loaded = RNNSeq2Seq.from_pretrained(directory)
    assert loaded.config == model.config
    assert not loaded.training and not any(m.training for m in loaded.modules())
    expected, got = model.state_dict(), loaded.state_dict()
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
    src, lengths, tgt_in = batch()
    model.eval()  # dropout is 0.3: outputs agree only if from_pretrained left the model in eval mode
    with torch.no_grad():
        assert_close(loaded(src, lengths, tgt_in).logits, model(src, lengths, tgt_in).logits, rtol=0, atol=0)


def test_missing_directory(tmp_path):
    expect_error(tmp_path / "nowhere", f"{tmp_path / 'nowhere'}: no such checkpoint directory")


def test_missing_config(checkpoint):
    directory, config_path, _, _ = checkpoint
    config_path.unlink()
    expect_error(directory, f"{config_path}: missing; is {directory} a seqlab checkpoint?")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"model_type": "RNNSeq2Seq", ', ":1: not valid JSON (Expecting property name enclosed in double quotes)"),
        (b"\xff\xfe\x00binary", ":1: not a text file (control byte 0x00 at byte offset 2)"),
        (b"[" * 100_000 + b"]" * 100_000, ": not valid JSON (nested too deeply)"),
    ],
    ids=["truncated", "binary", "deep"],
)
def test_config_that_is_not_json(checkpoint, content, reason):
    directory, config_path, _, _ = checkpoint
    config_path.write_bytes(content)
    expect_error(directory, f"{config_path}{reason}")


@pytest.mark.parametrize(("payload", "found"), [({"model_type": "GPT", "config": {}}, "'GPT'"), ([1, 2], "None")])
def test_config_for_another_model_type(checkpoint, payload, found):
    directory, config_path, _, _ = checkpoint
    config_path.write_text(json.dumps(payload))
    expect_error(directory, f"{config_path}: holds a {found} model, expected 'rnn_seq2seq'")


def test_config_with_an_unknown_field(checkpoint):
    directory, config_path, _, payload = checkpoint
    payload["config"]["num_heads"] = 4
    config_path.write_text(json.dumps(payload))
    message = "RNNSeq2SeqConfig.__init__() got an unexpected keyword argument 'num_heads'"
    expect_error(directory, f"{config_path}: bad config ({message})")


def test_config_with_an_invalid_value(checkpoint):
    directory, config_path, _, payload = checkpoint
    payload["config"]["dropout"] = 1.5
    config_path.write_text(json.dumps(payload))
    expect_error(directory, f"{config_path}: bad config (dropout (1.5) must be in [0, 1))")


def test_config_without_its_config_object(checkpoint):
    """Currently a bare KeyError('config') escapes from_pretrained."""
    directory, config_path, _, _ = checkpoint
    config_path.write_text(json.dumps({"model_type": "rnn_seq2seq"}))
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(config_path))}: "):
        RNNSeq2Seq.from_pretrained(directory)


def test_config_with_a_pad_id_outside_the_vocabulary(checkpoint):
    """Currently nn.Embedding's AssertionError('Padding_idx must be within num_embeddings') escapes."""
    directory, config_path, _, payload = checkpoint
    payload["config"]["pad_id"] = 99
    config_path.write_text(json.dumps(payload))
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(config_path))}: bad config \(pad_id \(99\)"):
        RNNSeq2Seq.from_pretrained(directory)


def test_missing_weights(checkpoint):
    directory, _, weights_path, _ = checkpoint
    weights_path.unlink()
    expect_error(directory, f"{weights_path}: missing")


def test_corrupt_weights(checkpoint):
    directory, _, weights_path, _ = checkpoint
    weights_path.write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(weights_path))}: cannot load weights \\("):
        RNNSeq2Seq.from_pretrained(directory)


def test_weights_with_other_parameter_names(checkpoint):
    directory, config_path, weights_path, payload = checkpoint
    payload["config"]["attention"] = "dot"  # drops the additive scorer, adds the dot scorer's key projection
    config_path.write_text(json.dumps(payload))
    missing = ["decoder.key_projection.weight"]
    unexpected = [
        "decoder.attention.key_proj.weight",
        "decoder.attention.query_proj.weight",
        "decoder.attention.v.weight",
    ]
    expect_error(
        directory, f"{weights_path}: weights do not match the config (missing {missing}, unexpected {unexpected})"
    )


def test_weights_with_other_shapes(checkpoint):
    """hidden_size 8 saved, 6 in config.json: one line that says the weights do not match the config.

    Currently the message is "cannot load weights (" followed by torch's ~30-line list of size mismatches.
    """
    directory, config_path, weights_path, payload = checkpoint
    payload["config"]["hidden_size"] = 6
    config_path.write_text(json.dumps(payload))
    with pytest.raises(CheckpointError) as info:
        RNNSeq2Seq.from_pretrained(directory)
    message = str(info.value)
    assert message.startswith(f"{weights_path}: weights do not match the config"), message
    assert "\n" not in message


def test_a_model_past_the_parameter_limit_is_refused_before_allocation_naming_its_largest_size():
    # 65,536 wide: 2.3 TB of float32 weights, so only the meta-device count can have run. By hand: token and
    # position embeddings (tied head), per layer 4 D^2 + 4 D attention, 8 D^2 + 5 D feed-forward, 4 D two norms,
    # and the final norm.
    D, V, T, L = 65_536, 50_000, 1024, 12
    count = V * D + T * D + L * (12 * D * D + 13 * D) + 2 * D
    with pytest.raises(ConfigError) as caught:
        GPT(GPTConfig(vocab_size=V, context_length=T, d_model=D, num_heads=2, num_layers=L))
    assert str(caught.value) == (
        f"gpt: {count:,} parameters, more than the limit of 1,000,000,000 (3.7 GiB of float32 weights); "
        "reduce d_model (65536)"
    )


def test_a_saved_config_with_a_huge_width_is_a_checkpoint_error_before_allocation(tmp_path):
    GPT(GPTConfig(vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=1)).save_pretrained(tmp_path)
    payload = json.loads((tmp_path / "config.json").read_text())
    payload["config"]["d_model"] = 65_536
    (tmp_path / "config.json").write_text(json.dumps(payload))
    with pytest.raises(
        CheckpointError, match=r"config.json: bad config \(gpt: [0-9,]+ parameters, more than the limit"
    ):
        load_pretrained(tmp_path)


def test_the_build_that_counts_parameters_skips_every_initialisation():
    # The count runs before every model's construction (train, load, serve): the first normal_ on the meta device
    # imports torch's Python meta kernels, seconds of every command's start, for values nobody reads.
    w = torch.zeros(3, 4)
    with _NoInitialisation():
        assert nn.init.normal_(w) is w and nn.init.trunc_normal_(tensor=w, std=0.02) is w
        assert nn.init.xavier_uniform_(w) is w and nn.init.kaiming_normal_(w) is w
        assert w.normal_() is w and w.uniform_(-1, 1) is w
        embedding = nn.Embedding(5, 4, device="meta")
    assert torch.equal(w, torch.zeros(3, 4)) and embedding.weight.is_meta
    assert nn.init.normal_(w) is w and not torch.equal(w, torch.zeros(3, 4))  # outside the mode, they run
