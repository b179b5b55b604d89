"""Language models: p(x_{t+1} | x_<=t) over a token stream, recurrent (``rnn``) and Transformer (``gpt``)."""

from seqlab.models.language_model.rnn import (
    RNNLanguageModel,
    RNNLanguageModelConfig,
    ZarembaPreset,
    ZarembaTraining,
    zaremba_large,
    zaremba_medium,
    zaremba_small,
)

__all__ = [
    "RNNLanguageModel",
    "RNNLanguageModelConfig",
    "ZarembaPreset",
    "ZarembaTraining",
    "zaremba_large",
    "zaremba_medium",
    "zaremba_small",
]
