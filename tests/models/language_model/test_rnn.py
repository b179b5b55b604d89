import re

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from seqlab.decoding import generate
from seqlab.errors import ConfigError
from seqlab.models import (
    MODEL_TYPES,
    LanguageModelOutput,
    RNNLanguageModel,
    RNNLanguageModelConfig,
    ZarembaTraining,
    load_pretrained,
    zaremba_large,
    zaremba_medium,
    zaremba_small,
)
from seqlab.nn.cells import LSTMState

V, E, H, L = 11, 5, 6, 2
CELLS = ["rnn", "gru", "lstm"]


def make_model(*, dtype=torch.float64, seed=0, **overrides):
    options = {"vocab_size": V, "embedding_size": E, "hidden_size": H, "num_layers": L, **overrides}
    torch.manual_seed(seed)
    return RNNLanguageModel(RNNLanguageModelConfig(**options)).to(dtype).eval()


def tokens(*shape, seed=1):
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


class TorchLM(nn.Module):
    """The bare reference: nn.Embedding -> torch.nn.RNN/GRU/LSTM -> nn.Linear."""

    def __init__(self, cell):
        super().__init__()
        self.embedding = nn.Embedding(V, E)
        self.rnn = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}[cell](E, H, num_layers=L, batch_first=True)
        self.output = nn.Linear(H, V)

    def forward(self, x, state=None):
        hidden, state = self.rnn(self.embedding(x), state)
        return self.output(hidden), state


def load_from_torch(model, reference):
    """Copy the reference's weights into the seqlab model by name (cells.{l}.weight_ih <- weight_ih_l{l})."""
    with torch.no_grad():
        model.embedding.weight.copy_(reference.embedding.weight)
        model.output.weight.copy_(reference.output.weight)
        model.output.bias.copy_(reference.output.bias)
        for layer, cell in enumerate(model.rnn.cells):
            for name, parameter in cell.named_parameters():
                parameter.copy_(getattr(reference.rnn, f"{name}_l{layer}"))


@pytest.mark.parametrize("cell", CELLS)
def test_logits_and_state_equal_a_bare_torch_nn_language_model_in_float64(cell):
    torch.manual_seed(3)
    reference = TorchLM(cell).double().eval()
    model = make_model(cell=cell)
    load_from_torch(model, reference)
    assert model.fused
    x = tokens(3, 7)
    expected_logits, expected_state = reference(x)
    logits, state = model(x)
    assert_close(logits, expected_logits)
    assert_close(tuple(state) if cell == "lstm" else state, expected_state)
    # a given state continues the same streams in both
    more = tokens(3, 4, seed=2)
    expected_logits, _ = reference(more, expected_state)
    assert_close(model(more, state).logits, expected_logits)


@pytest.mark.parametrize("cell", CELLS)
def test_two_windows_with_carried_state_equal_one_long_window(cell):
    model = make_model(cell=cell)
    x = tokens(4, 9)
    whole = model(x)
    first = model(x[:, :5])
    second = model(x[:, 5:], first.state)
    assert_close(torch.cat([first.logits, second.logits], 1), whole.logits)
    assert_close(second.state, whole.state)


@pytest.mark.parametrize("cell", CELLS)
def test_prefill_of_left_padded_prompts_equals_each_prompt_alone(cell):
    model = make_model(cell=cell)
    prompts = [tokens(1, n, seed=n)[0] for n in (5, 2, 4, 1)]
    T = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), T), 7)  # the padding holds an ordinary token, so nothing may read it
    keep_mask = torch.zeros(len(prompts), T, dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        input_ids[row, T - len(prompt) :] = prompt
        keep_mask[row, T - len(prompt) :] = True
    logits, state = model.prefill(input_ids, keep_mask)
    for row, prompt in enumerate(prompts):
        alone_logits, alone_state = model.prefill(prompt.unsqueeze(0))
        assert_close(logits[row], alone_logits[0])
        assert_close(model.reorder_state(state, torch.tensor([row])), alone_state)
    # generation continues from the padded batch's state as from each prompt's own
    next_tokens = logits.argmax(-1)
    stepped = model.step(next_tokens, state).logits
    for row, prompt in enumerate(prompts):
        alone = model.step(next_tokens[row : row + 1], model.prefill(prompt.unsqueeze(0)).state).logits
        assert_close(stepped[row], alone[0])


def test_right_padding_leaves_the_real_positions_and_the_final_state_unchanged():
    model = make_model()
    x = tokens(2, 6)
    keep_mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    padded = model(x, keep_mask=keep_mask)
    alone = model(x[1:, :3])
    assert_close(padded.logits[1, :3], alone.logits[0])
    assert_close(model.reorder_state(padded.state, torch.tensor([1])), alone.state)
    assert_close(padded.logits[0], model(x[:1]).logits[0])


@pytest.mark.parametrize("cell", CELLS)
def test_cached_step_by_step_logits_equal_the_full_forward(cell):
    model = make_model(cell=cell)
    x = tokens(3, 6)
    full = model(x).logits
    state = None
    for t in range(x.shape[1]):
        logits, state = model.step(x[:, t], state)
        assert_close(logits, full[:, t])


def test_reorder_state_picks_and_repeats_rows_of_every_layer():
    model = make_model()
    _, state = model(tokens(3, 4))
    index = torch.tensor([2, 2, 0])
    reordered = model.reorder_state(state, index)
    assert isinstance(reordered, LSTMState)
    assert_close(reordered.h, state.h[:, index])
    assert_close(reordered.c, state.c[:, index])


def test_tie_embeddings_shares_one_tensor_also_after_save_and_load(tmp_path):
    model = make_model(embedding_size=H, tie_embeddings=True, init_range=0.1)
    assert model.output.weight is model.embedding.weight
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for name, p in model.named_parameters() if name != "output.weight"
    )
    model.save_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path)
    assert isinstance(loaded, RNNLanguageModel)
    assert loaded.output.weight is loaded.embedding.weight
    x = tokens(2, 5)
    assert_close(loaded.double()(x).logits, model(x).logits)


def test_init_range_draws_every_weight_from_the_interval_and_keeps_layer_norm_gains():
    model = make_model(init_range=0.05, cell="gru", layer_norm=True)
    for name, parameter in model.named_parameters():
        if ".gain" in name:
            assert_close(parameter, torch.ones_like(parameter))
        else:
            assert parameter.abs().max() <= 0.05, name
    assert not model.fused  # layer-normalised cells run the reference loop


def test_dropout_is_on_the_non_recurrent_connections_and_off_in_eval():
    model = make_model(dropout=0.5)
    assert model.rnn.dropout == 0.5 and model.rnn.recurrent_dropout == 0.0 and model.fused
    x = tokens(2, 5)
    twin = make_model()
    twin.load_state_dict(model.state_dict())
    assert_close(model(x).logits, twin(x).logits)
    model.train()
    assert not torch.allclose(model(x).logits, twin(x).logits)


def test_presets_have_the_sizes_and_training_settings_of_zaremba_et_al_2014():
    small, medium, large = zaremba_small(10000), zaremba_medium(10000), zaremba_large(10000)
    for preset, size, dropout, init in ((small, 200, 0.0, 0.1), (medium, 650, 0.5, 0.05), (large, 1500, 0.65, 0.04)):
        config = preset.config
        assert (config.vocab_size, config.num_layers, config.cell) == (10000, 2, "lstm")
        assert (config.embedding_size, config.hidden_size) == (size, size)
        assert (config.dropout, config.init_range, config.tie_embeddings) == (dropout, init, False)
    assert small.training == ZarembaTraining(
        lr=1.0, decay_factor=2.0, decay_after=4, clip_norm=5.0, bptt_len=20, batch_size=20, epochs=13
    )
    assert medium.training == ZarembaTraining(
        lr=1.0, decay_factor=1.2, decay_after=6, clip_norm=5.0, bptt_len=35, batch_size=20, epochs=39
    )
    assert large.training == ZarembaTraining(
        lr=1.0, decay_factor=1.15, decay_after=14, clip_norm=10.0, bptt_len=35, batch_size=20, epochs=55
    )
    assert [small.training.lr_at(epoch) for epoch in (1, 4, 5, 6)] == [1.0, 1.0, 0.5, 0.25]


def test_registry_and_output_type():
    assert MODEL_TYPES["rnn_language_model"] is RNNLanguageModel
    assert RNNLanguageModel.context_length is None
    assert isinstance(make_model()(tokens(1, 2)), LanguageModelOutput)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vocab_size": 1}, "vocab_size (1) must be an integer >= 2"),
        ({"hidden_size": 0}, "hidden_size (0) must be an integer >= 1"),
        ({"num_layers": 0}, "num_layers (0) must be an integer >= 1"),
        ({"cell": "tanh"}, "cell ('tanh') must be one of 'rnn', 'gru', 'gru_textbook', 'lstm'"),
        ({"dropout": 1.0}, "dropout (1.0) must be in [0, 1)"),
        ({"init_range": 0.0}, "init_range (0.0) must be None or a finite number > 0.0"),
        (
            {"layer_norm": True, "cell": "rnn"},
            "layer_norm=True needs cell 'gru' or 'lstm'; the Elman 'rnn' has no layer-norm cell",
        ),
        (
            {"tie_embeddings": True},
            "tie_embeddings=True needs embedding_size (5) == hidden_size (6): the output layer reuses the (V, E) "
            "embedding matrix on H features",
        ),
    ],
)
def test_config_errors_show_the_bad_values(options, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        make_model(**options)


@pytest.mark.parametrize(
    ("keep_mask", "message"),
    [
        (torch.tensor([[True, False, True]]), "keep_mask rows [0] have real tokens that are not contiguous"),
        (torch.tensor([[False, False, False]]), "every row needs at least one real token; rows [0] have none"),
        (torch.tensor([[1, 1, 1]]), "keep_mask must be a bool tensor of shape (1, 3) like input_ids"),
    ],
)
def test_bad_keep_masks_are_reported(keep_mask, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make_model()(tokens(1, 3), keep_mask=keep_mask)


def test_generate_refuses_a_token_id_outside_the_vocabulary_in_one_line():
    with pytest.raises(ConfigError, match=rf"^input_ids holds token id {V}, outside the vocabulary \[0, {V}\)$"):
        generate(make_model(), torch.tensor([[1, V]]), max_new_tokens=2)
