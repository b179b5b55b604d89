"""generate() against transformers' own generate() on a tiny random GPT-2, wrapped in the step interface."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from seqlab.decoding import generate
from seqlab.models.interfaces import StepOutput, select_rows

EOS, PAD = 1, 0


class HFStepModel:
    """A transformers causal LM behind ``LanguageModelStepModel``, without a cache: every call reruns the whole
    sequence, with positions counting real tokens only (as transformers' generate does for left padding)."""

    def __init__(self, model: GPT2LMHeadModel) -> None:
        self.model, self.context_length = model, model.config.n_positions

    def _logits(self, state):
        ids, keep = state
        positions = (keep.long().cumsum(dim=1) - 1).clamp(min=0)
        return self.model(input_ids=ids, attention_mask=keep.long(), position_ids=positions).logits[:, -1]

    def prefill(self, input_ids, keep_mask=None):
        keep_mask = torch.ones_like(input_ids, dtype=torch.bool) if keep_mask is None else keep_mask
        return StepOutput(self._logits((input_ids, keep_mask)), (input_ids, keep_mask))

    def step(self, tokens, state):
        ids, keep = state
        state = torch.cat([ids, tokens.unsqueeze(1)], dim=1), torch.cat([keep, torch.ones_like(keep[:, :1])], dim=1)
        return StepOutput(self._logits(state), state)

    def reorder_state(self, state, index):
        return select_rows(state, index)


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    # Untied: a tied head makes this random model copy its last token forever.
    config = GPT2Config(
        vocab_size=12, n_positions=32, n_embd=16, n_layer=2, n_head=2, tie_word_embeddings=False, eos_token_id=EOS
    )
    model = GPT2LMHeadModel(config).double().eval()
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 0.3)
    return model


PROMPTS = [[5, 3, 7], [2], [4, 4, 9, 1, 6], [8, 2]]


def _left_pad(prompts):
    T = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (T - len(p)) + p for p in prompts])
    keep = torch.tensor([[False] * (T - len(p)) + [True] * len(p) for p in prompts])
    return ids, keep


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"repetition_penalty": 1.5},
        {"no_repeat_ngram_size": 2},
        {"repetition_penalty": 0.7, "no_repeat_ngram_size": 3},
        {"num_beams": 3},
        {"num_beams": 4, "length_penalty": 0.0},
        {"num_beams": 3, "no_repeat_ngram_size": 2},
        {"num_beams": 3, "repetition_penalty": 1.3, "no_repeat_ngram_size": 3, "length_penalty": 0.5},
    ],
)
def test_tokens_equal_transformers_generate_on_left_padded_prompts(hf_model, settings):
    ids, keep = _left_pad(PROMPTS)
    T, max_new = ids.shape[1], 8
    ours = generate(HFStepModel(hf_model), ids, keep_mask=keep, max_new_tokens=max_new, eos_id=EOS, **settings)
    extra = {"early_stopping": "never"} if settings.get("num_beams", 1) > 1 else {}
    theirs = hf_model.generate(
        ids,
        attention_mask=keep.long(),
        max_new_tokens=max_new,
        do_sample=False,
        eos_token_id=EOS,
        pad_token_id=EOS,
        **extra,
        **settings,
    )
    assert ours.lengths.min() < max_new  # some rows end at EOS
    for b in range(len(PROMPTS)):
        n = int(ours.lengths[b])
        assert ours.tokens[b, T : T + n].tolist() == theirs[b, T : T + n].tolist()
        assert torch.all(theirs[b, T + n :] == EOS)


def test_sampling_draws_the_same_tokens_as_transformers_from_the_same_seed(hf_model):
    # One prompt at a time: both then draw from the global RNG with the same (1, V) probabilities every step.
    settings = {"temperature": 0.8, "top_k": 6, "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.2}
    lengths = []
    for seed, prompt in enumerate(PROMPTS):
        ids = torch.tensor([prompt])
        torch.manual_seed(seed)
        ours = generate(HFStepModel(hf_model), ids, max_new_tokens=8, do_sample=True, eos_id=EOS, **settings)
        torch.manual_seed(seed)
        theirs = hf_model.generate(
            ids, max_new_tokens=8, do_sample=True, eos_token_id=EOS, pad_token_id=EOS, **settings
        )
        assert torch.equal(ours.tokens, theirs)
        lengths.append(int(ours.lengths[0]))
    assert sum(lengths) >= 6  # several sampled steps compared
