import dataclasses
import json
import re

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence
from torch.testing import assert_close

from seqlab.models.classifier import (
    ClassifierOutput,
    Seq2VecClassifier,
    Seq2VecClassifierConfig,
    TCNClassifier,
    TCNClassifierConfig,
)

CELLS = ["rnn", "gru", "lstm"]
POOLINGS = ["last", "mean", "max", "attention"]
E, V, K = 3, 7, 4  # features per step, vocabulary size, classes
LENGTHS = [5, 2, 4]  # unsorted, with padding in rows 1 and 2


def make_model(*, tokens=False, dtype=torch.float64, seed=0, **overrides):
    inputs = {"vocab_size": V, "embedding_size": E} if tokens else {"input_size": E}
    options = {"hidden_size": 4, "num_layers": 2, "bidirectional": True, "dropout": 0.0, **inputs, **overrides}
    torch.manual_seed(seed)
    return Seq2VecClassifier(Seq2VecClassifierConfig(K, **options)).to(dtype).eval()


def make_batch(*, tokens=False, dtype=torch.float64, seed=1):
    """x whose padded steps hold ordinary values, so nothing may read them, and lengths (B,)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(LENGTHS)
    shape = (len(LENGTHS), max(LENGTHS))
    x = torch.randint(0, V, shape, generator=g) if tokens else torch.randn(*shape, E, generator=g, dtype=dtype)
    return x, lengths


@pytest.mark.parametrize("tokens", [False, True])
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("cell", CELLS)
def test_a_row_alone_gives_what_it_gives_in_a_padded_batch(cell, pooling, tokens):
    model = make_model(tokens=tokens, cell=cell, pooling=pooling)
    x, lengths = make_batch(tokens=tokens)
    batched = model(x, lengths)
    assert isinstance(batched, ClassifierOutput) and batched.logits.shape == (3, K)
    for b, n in enumerate(LENGTHS):
        alone = model(x[b : b + 1, :n])  # no lengths: every step real
        assert_close(batched.logits[b : b + 1], alone.logits)
        if pooling == "attention":
            assert_close(batched.attention[b : b + 1, :n], alone.attention)
            assert torch.all(batched.attention[b, n:] == 0.0)
        else:
            assert batched.attention is None and alone.attention is None


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("cell", CELLS)
def test_last_pooling_logits_match_torch_nn_final_state_and_the_output_layer(cell, bidirectional):
    model = make_model(cell=cell, pooling="last", bidirectional=bidirectional)
    x, lengths = make_batch()
    rnn = model.rnn.to_torch()
    _, h_n = rnn(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    h_n = h_n[0] if cell == "lstm" else h_n  # (L*C, B, H)
    s = torch.cat([h_n[-2], h_n[-1]], dim=-1) if bidirectional else h_n[-1]  # (B, C*H)
    expected = s @ model.output.weight.T + model.output.bias  # y = W_y s + b_y
    assert_close(model(x, lengths).logits, expected)


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("cell", CELLS)
def test_every_pooling_and_cell_trains_and_gradients_reach_every_parameter(cell, pooling):
    model = make_model(tokens=True, cell=cell, pooling=pooling, dropout=0.2, dtype=torch.float32).train()
    x, lengths = make_batch(tokens=True)
    x[:, 0] = torch.arange(3)  # with the other tokens, every embedding row is used
    assert set(x.flatten().tolist()) == set(range(V))
    logits, attention = model(x, lengths)
    assert (attention is None) == (pooling != "attention")
    F.cross_entropy(logits, torch.tensor([0, 1, 3])).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.all(torch.isfinite(p.grad)), name
        assert p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("cell", CELLS)
def test_dropout_is_inactive_in_eval_against_a_dropout_free_twin(cell):
    """Same weights, dropout 0: equal in eval (dropout off), different in training (dropout on)."""
    model = make_model(cell=cell, dropout=0.5, pooling="attention")
    twin = make_model(cell=cell, dropout=0.0, pooling="attention", seed=1)
    twin.load_state_dict(model.state_dict())
    x, lengths = make_batch()
    assert_close(model(x, lengths).logits, twin(x, lengths).logits, rtol=0, atol=0)
    model.train()
    twin.train()
    torch.manual_seed(0)
    assert not torch.equal(model(x, lengths).logits, twin(x, lengths).logits)
    assert_close(twin(x, lengths).logits, twin.eval()(x, lengths).logits, rtol=0, atol=0)


@pytest.mark.parametrize(
    "overrides",
    [{"pooling": "attention", "attention_size": 5}, {"tokens": True, "cell": "lstm", "pooling": "max"}],
)
def test_save_and_load_round_trip_gives_identical_outputs(tmp_path, overrides):
    tokens = overrides.get("tokens", False)
    model = make_model(dtype=torch.float32, **overrides)
    x, lengths = make_batch(tokens=tokens, dtype=torch.float32)
    model.save_pretrained(tmp_path)
    payload = json.loads((tmp_path / "config.json").read_text())
    assert payload == {"model_type": "seq2vec_classifier", "config": dataclasses.asdict(model.config)}

    loaded = Seq2VecClassifier.from_pretrained(tmp_path)
    assert loaded.config == model.config and not loaded.training
    expected, got = model(x, lengths), loaded(x, lengths)
    assert_close(got.logits, expected.logits, rtol=0, atol=0)
    if expected.attention is not None:
        assert_close(got.attention, expected.attention, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_classes": 1, "input_size": 3}, "num_classes (1) must be an integer >= 2"),
        ({"num_classes": 2}, "token input needs both vocab_size (None) and embedding_size (None); "
         "continuous input needs input_size"),
        ({"num_classes": 2, "vocab_size": 9}, "token input needs both vocab_size (9) and embedding_size (None); "
         "continuous input needs input_size"),
        ({"num_classes": 2, "input_size": 12, "vocab_size": 9, "embedding_size": 4},
         "give input_size (12) for continuous input or vocab_size (9) and embedding_size (4) for token input, "
         "not both"),
        ({"num_classes": 2, "input_size": 12, "embedding_size": 4},
         "give input_size (12) for continuous input or vocab_size (None) and embedding_size (4) for token input, "
         "not both"),
        ({"num_classes": 2, "input_size": 0}, "input_size (0) must be None or an integer >= 1"),
        ({"num_classes": 2, "input_size": 3, "attention_size": 2.5}, "attention_size (2.5) must be None or an "
         "integer >= 1"),
        ({"num_classes": 2, "input_size": 3, "hidden_size": 0}, "hidden_size (0) must be an integer >= 1"),
        ({"num_classes": 2, "input_size": 3, "num_layers": True}, "num_layers (True) must be an integer >= 1"),
        ({"num_classes": 2, "input_size": 3, "cell": "tcn"}, "cell ('tcn') must be one of 'rnn', 'gru', 'lstm'"),
        ({"num_classes": 2, "input_size": 3, "pooling": "sum"}, "pooling ('sum') must be one of 'last', 'mean', "
         "'max', 'attention'"),
        ({"num_classes": 2, "input_size": 3, "bidirectional": 1}, "bidirectional (1) must be true or false"),
        ({"num_classes": 2, "input_size": 3, "dropout": 1.0}, "dropout (1.0) must be in [0, 1)"),
    ],
)  # fmt: skip
def test_config_validation_messages_show_the_values(options, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Seq2VecClassifierConfig(**options)


@pytest.mark.parametrize(
    ("tokens", "x", "message"),
    [
        (True, torch.randn(2, 3), "token input x must be (B, T) integer ids, got shape (2, 3) torch.float32"),
        (True, torch.zeros(2, 3, 1, dtype=torch.long), "token input x must be (B, T) integer ids, got shape "
         "(2, 3, 1) torch.int64"),
        (False, torch.zeros(2, 3, dtype=torch.long), "continuous input x must be (B, T, E) floating features, got "
         "shape (2, 3) torch.int64"),
        (False, torch.randn(2, 3, E + 1), f"expected x with {E} features (input_size), got {E + 1}"),
    ],
)  # fmt: skip
def test_bad_input_gives_clear_errors(tokens, x, message):
    model = make_model(tokens=tokens, dtype=torch.float32)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        model(x)


def test_bad_lengths_are_reported_by_the_recurrent_layer():
    model = make_model(dtype=torch.float32)
    with pytest.raises(ValueError, match=re.escape("lengths must be in [1, T] = [1, 3], got values from 0 to 3")):
        model(torch.randn(2, 3, E), torch.tensor([3, 0]))


def test_a_tiny_classifier_learns_which_channel_is_largest_on_average():
    g = torch.Generator().manual_seed(0)
    B, T = 96, 8
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    x = torch.randn(B, T, 3, generator=g)
    keep = (torch.arange(T) < lengths.unsqueeze(1)).unsqueeze(-1)  # (B, T, 1)
    x = torch.where(keep, x, torch.tensor([0.0, 0.0, 5.0]))  # padding that favours channel 2
    y = (x.masked_fill(~keep, 0.0).sum(dim=1) / lengths.unsqueeze(1)).argmax(dim=1)  # (B,)
    assert (x.mean(dim=1).argmax(dim=1) != y).float().mean() > 0.3  # a model reading padding would fail

    torch.manual_seed(0)
    model = Seq2VecClassifier(
        Seq2VecClassifierConfig(3, input_size=3, hidden_size=12, cell="gru", bidirectional=False, pooling="mean")
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(100):
        optimizer.zero_grad()
        F.cross_entropy(model(x, lengths).logits, y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x, lengths).logits.argmax(dim=1) == y).float().mean().item()
    assert accuracy >= 0.95


def make_tcn(pooling, seed=0):
    torch.manual_seed(seed)
    config = TCNClassifierConfig(V, K, embedding_size=E, hidden_size=5, num_levels=2, kernel_size=2, pooling=pooling)
    return TCNClassifier(config).double().eval()


@pytest.mark.parametrize("pooling", POOLINGS)
def test_tcn_classifier_right_padding_changes_nothing_and_pools_the_tcn_outputs(pooling):
    model = make_tcn(pooling)
    x = torch.randint(0, V, (3, 5), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor(LENGTHS)
    padded = model(x, lengths).logits
    for row, length in enumerate(LENGTHS):
        alone = model(x[row : row + 1, :length]).logits
        assert_close(padded[row : row + 1], alone)
    h = model.tcn(model.embedding(x[:1])).outputs  # (1, 5, H), all real
    expected = {"last": h[:, -1], "mean": h.mean(1), "max": h.amax(1)}.get(pooling)
    if expected is not None:
        assert_close(model(x[:1]).logits, model.output(expected))
    assert model.receptive_field == model.config.receptive_field == 7  # 1 + 2 (k - 1)(2^L - 1)
