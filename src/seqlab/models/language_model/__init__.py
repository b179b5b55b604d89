"""Language models: p(x_{t+1} | x_<=t) over a token stream, trained by maximum likelihood and decoded one token at
a time: recurrent (``rnn``), Transformer decoder-only (``gpt``) convolutional (``tcn``) and state-space
(``ssm``)."""

from seqlab.models.language_model.compiled import CompiledGPT, CompiledGPTState
from seqlab.models.language_model.gpt import GPT, GPTConfig, GPTState, gpt, gpt2_small, gpt_char_small
from seqlab.models.language_model.rnn import (
    RNNLanguageModel,
    RNNLanguageModelConfig,
    ZarembaPreset,
    ZarembaTraining,
    zaremba_large,
    zaremba_medium,
    zaremba_small,
)
from seqlab.models.language_model.ssm import SSMLanguageModel, SSMLanguageModelConfig
from seqlab.models.language_model.tcn import TCNLanguageModel, TCNLanguageModelConfig

__all__ = [
    "GPT",
    "CompiledGPT",
    "CompiledGPTState",
    "GPTConfig",
    "GPTState",
    "RNNLanguageModel",
    "RNNLanguageModelConfig",
    "SSMLanguageModel",
    "SSMLanguageModelConfig",
    "TCNLanguageModel",
    "TCNLanguageModelConfig",
    "ZarembaPreset",
    "ZarembaTraining",
    "gpt",
    "gpt2_small",
    "gpt_char_small",
    "zaremba_large",
    "zaremba_medium",
    "zaremba_small",
]
