"""ELMo (Peters et al., 2018): a bidirectional LSTM language model whose layers, mixed per task, are features."""

from seqlab.models.elmo.bilm import BiLMLoss, BiLMOutput, ELMo, ELMoConfig, ELMoRepresentations
from seqlab.models.elmo.classifier import ELMoClassifier, ELMoClassifierConfig

__all__ = [
    "BiLMLoss",
    "BiLMOutput",
    "ELMo",
    "ELMoClassifier",
    "ELMoClassifierConfig",
    "ELMoConfig",
    "ELMoRepresentations",
]
