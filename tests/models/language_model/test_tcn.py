"""The convolutional language model: equal to the equations written with torch's conv1d, streamed windows and
cached steps equal to one pass, left padding changes nothing, greedy generation with the cache equal to recomputing
the whole text, save / load, bad configs in one line."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from seqlab.decoding import generate
from seqlab.errors import ConfigError
from seqlab.models import MODEL_TYPES, TCNLanguageModel, TCNLanguageModelConfig, load_pretrained

V, E, H = 11, 5, 6


def make_model(*, seed=0, **overrides):
    options = {"vocab_size": V, "embedding_size": E, "hidden_size": H, "num_levels": 3, "kernel_size": 2, **overrides}
    torch.manual_seed(seed)
    return TCNLanguageModel(TCNLanguageModelConfig(**options)).double().eval()


def tokens(*shape, seed=1):
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


def reference_logits(model, input_ids):
    """The module docstring's equations with F.conv1d on inputs left-padded by (k - 1) d zeros."""
    k = model.config.kernel_size
    h = model.embedding.weight[input_ids].transpose(1, 2)  # (B, E, T)
    for level, block in enumerate(model.tcn.levels):
        d = 2**level
        z = h
        for conv in (block.conv1, block.conv2):
            z = torch.relu(F.conv1d(F.pad(z, ((k - 1) * d, 0)), conv.conv.weight, conv.conv.bias, dilation=d))
        skip = h if block.skip is None else F.conv1d(h, block.skip.weight.unsqueeze(-1), block.skip.bias)
        h = torch.relu(z + skip)
    return model.output(h.transpose(1, 2))


def test_logits_equal_the_equations_written_with_conv1d():
    model = make_model()
    x = tokens(2, 20)
    assert_close(model(x).logits, reference_logits(model, x))
    assert model.receptive_field == model.config.receptive_field == 1 + 2 * (2 - 1) * (2**3 - 1)


def test_two_windows_with_carried_state_equal_one_long_window():
    model = make_model(kernel_size=3)
    x = tokens(3, 30)
    whole = model(x).logits
    first, state = model(x[:, :7])
    second, _ = model(x[:, 7:], state)
    assert_close(torch.cat([first, second], 1), whole)


def test_cached_step_by_step_logits_equal_the_full_forward():
    model = make_model()
    x = tokens(2, 12)
    logits, state = model.prefill(x[:, :3])
    steps = [logits]
    for t in range(3, 12):
        logits, state = model.step(x[:, t], state)
        steps.append(logits)
    assert_close(torch.stack(steps, 1), model(x).logits[:, 2:])


def test_prefill_of_left_padded_prompts_equals_each_prompt_alone():
    model = make_model()
    long, short = tokens(1, 9, seed=2), tokens(1, 4, seed=3)
    padded = torch.cat([long, torch.cat([torch.full((1, 5), 7), short], 1)])
    keep_mask = torch.ones(2, 9, dtype=torch.bool)
    keep_mask[1, :5] = False
    logits, state = model.prefill(padded, keep_mask)
    for row, prompt in enumerate((long, short)):
        alone, alone_state = model.prefill(prompt)
        assert_close(logits[row], alone[0])
        next_token = torch.tensor([3])
        assert_close(
            model.step(next_token, model.reorder_state(state, torch.tensor([row]))).logits,
            model.step(next_token, alone_state).logits,
        )


def test_greedy_generation_with_the_cache_equals_recomputing_the_whole_text():
    model = make_model(num_levels=2)
    prompt = tokens(2, 5)
    generated = generate(model, prompt, max_new_tokens=8)
    text = prompt
    for _ in range(8):
        text = torch.cat([text, model(text).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(generated.tokens, text)


@pytest.mark.parametrize("weight_norm", [False, True])
def test_save_and_load_give_the_same_logits(tmp_path, weight_norm):
    model = make_model(weight_norm=weight_norm, dropout=0.1)
    model.save_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path).double().eval()
    assert MODEL_TYPES["tcn_language_model"] is TCNLanguageModel and type(loaded) is TCNLanguageModel
    assert loaded.config == model.config
    x = tokens(2, 10)
    assert_close(loaded(x).logits, model(x).logits)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vocab_size": 1}, "vocab_size (1) must be an integer >= 2"),
        ({"kernel_size": 0}, "kernel_size (0) must be an integer >= 1"),
        ({"num_levels": -1}, "num_levels (-1) must be an integer >= 1"),
        ({"hidden_size": 0}, "hidden_size (0) must be an integer >= 1"),
        ({"dropout": 1.0}, "dropout (1.0) must be in [0, 1)"),
        ({"weight_norm": "yes"}, "weight_norm ('yes') must be true or false"),
    ],
)
def test_config_errors_show_the_bad_values(options, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        make_model(**options)


@pytest.mark.parametrize(
    ("keep_mask", "message"),
    [
        (torch.tensor([[True, True, False]]), "keep_mask rows [0] are not left-padded real tokens"),
        (torch.tensor([[True, False, True]]), "keep_mask rows [0] are not left-padded real tokens"),
        (torch.tensor([[1, 1, 1]]), "keep_mask must be a bool tensor of shape (1, 3) like input_ids"),
    ],
)
def test_bad_keep_masks_are_reported(keep_mask, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make_model()(tokens(1, 3), keep_mask=keep_mask)
