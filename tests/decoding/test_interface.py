"""``reorders_in_place``: a step model declares ``InPlaceReorderModel`` by its ``reorder_state`` taking
``in_place``, and only then (``seqlab.decoding.interface``)."""

from seqlab.decoding import reorders_in_place
from seqlab.models import GPT, RNNLanguageModel
from seqlab.models.language_model.gpt import GPTConfig
from seqlab.models.language_model.rnn import RNNLanguageModelConfig


class Declares:
    def step(self, tokens, state): ...

    def reorder_state(self, state, index, *, in_place=False): ...


class TakesAnyKeyword:
    def step(self, tokens, state): ...

    def reorder_state(self, state, index, **options): ...


class Plain:
    def step(self, tokens, state): ...

    def reorder_state(self, state, index): ...


def test_only_a_reorder_state_that_takes_in_place_declares_it():
    assert reorders_in_place(Declares())
    assert not reorders_in_place(Plain())
    assert not reorders_in_place(TakesAnyKeyword())  # a keyword it may ignore is no declaration


def test_the_gpt_declares_it_and_a_recurrent_language_model_does_not():
    gpt = GPT(GPTConfig(vocab_size=5, context_length=8, d_model=8, num_heads=2, num_layers=1))
    assert reorders_in_place(gpt)
    assert not reorders_in_place(RNNLanguageModel(RNNLanguageModelConfig(vocab_size=5, hidden_size=4)))
