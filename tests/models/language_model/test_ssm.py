"""SSMLanguageModel: generation through the recurrent cache equals recomputing the parallel form on the whole prefix
(cached == uncached), padded prompts equal each prompt alone, chunks continue a stream, and save / load."""

import pytest
import torch
from torch.testing import assert_close

from seqlab.decoding import generate
from seqlab.errors import ConfigError
from seqlab.models import MODEL_TYPES, SSMLanguageModel, SSMLanguageModelConfig, load_pretrained

V = 11


def make_model(*, dtype=torch.float64, seed=0, **overrides):
    options = {"vocab_size": V, "d_model": 6, "num_layers": 2, "state_size": 4, **overrides}
    torch.manual_seed(seed)
    return SSMLanguageModel(SSMLanguageModelConfig(**options)).to(dtype).eval()


def tokens(*shape, seed=1):
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


def test_cached_step_by_step_logits_equal_the_full_forward():
    model = make_model()
    x = tokens(3, 9)
    full = model(x).logits
    logits, state = model.prefill(x[:, :4])
    assert_close(logits, full[:, 3])
    for t in range(4, 9):
        logits, state = model.step(x[:, t], state)
        assert_close(logits, full[:, t])


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generation_with_the_recurrent_cache_equals_recomputing_the_whole_prefix(num_beams):
    model = make_model()
    prompt = tokens(2, 5)
    cached = generate(model, prompt, max_new_tokens=8, num_beams=num_beams)

    class Uncached:
        """The same model with no cache: every step recomputes the parallel form over the whole prefix."""

        context_length = None

        def prefill(self, input_ids, keep_mask=None):
            return model.prefill(input_ids, keep_mask)._replace(state=input_ids)

        def step(self, tokens, prefix):
            prefix = torch.cat([prefix, tokens[:, None]], dim=1)
            return model.prefill(prefix)._replace(state=prefix)

        def reorder_state(self, prefix, index):
            return prefix.index_select(0, index)

    uncached = generate(Uncached(), prompt, max_new_tokens=8, num_beams=num_beams)
    assert torch.equal(cached.tokens, uncached.tokens)
    assert_close(cached.log_probs, uncached.log_probs)


def test_prefill_of_left_padded_prompts_equals_each_prompt_alone():
    model = make_model()
    prompts = [tokens(1, n, seed=n)[0] for n in (5, 2, 4)]
    T = 5
    input_ids = torch.full((3, T), 7)  # an ordinary token in the padding, so nothing may read it
    keep_mask = torch.zeros(3, T, dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        input_ids[row, T - len(prompt) :] = prompt
        keep_mask[row, T - len(prompt) :] = True
    logits, state = model.prefill(input_ids, keep_mask)
    next_tokens = logits.argmax(-1)
    stepped = model.step(next_tokens, state).logits
    for row, prompt in enumerate(prompts):
        alone_logits, alone_state = model.prefill(prompt.unsqueeze(0))
        assert_close(logits[row], alone_logits[0])
        assert_close(model.reorder_state(state, torch.tensor([row])), alone_state)
        assert_close(stepped[row], model.step(next_tokens[row : row + 1], alone_state).logits[0])


def test_two_chunks_with_carried_state_equal_one_long_chunk():
    model = make_model()
    x = tokens(2, 10)
    whole = model(x)
    first = model(x[:, :6])
    second = model(x[:, 6:], first.state)
    assert_close(torch.cat([first.logits, second.logits], 1), whole.logits)


def test_save_and_load_give_the_same_logits(tmp_path):
    model = make_model(dtype=torch.float32, init="inv")
    model.save_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path)
    assert isinstance(loaded, SSMLanguageModel) and MODEL_TYPES["ssm_language_model"] is SSMLanguageModel
    x = tokens(2, 7)
    assert_close(loaded(x).logits, model(x).logits)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"state_size": 3}, "state_size (3) must be even: N/2 complex modes and their conjugates"),
        ({"init": "legs"}, "init ('legs') must be one of 'lin', 'inv'"),
        ({"dropout": 1.0}, "dropout (1.0) must be in [0, 1)"),
    ],
)
def test_config_errors_show_the_bad_values(options, message):
    with pytest.raises(ConfigError) as error:
        make_model(**options)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("keep_mask", "message"),
    [
        (torch.tensor([[True, False, True]]), r"keep_mask rows \[0\] are not left-padded"),
        (torch.tensor([[True, True, False]]), r"keep_mask rows \[0\] are not left-padded"),
        (torch.ones(1, 2, dtype=torch.bool), r"keep_mask must be a bool tensor of shape \(1, 3\)"),
    ],
)
def test_bad_keep_masks_are_reported(keep_mask, message):
    with pytest.raises(ValueError, match=message):
        make_model()(tokens(1, 3), keep_mask=keep_mask)
