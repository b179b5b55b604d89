"""BERT (Devlin et al., 2019): the bidirectional Transformer encoder body (``model``), its pre-training and
fine-tuning heads (``heads``), and Hugging Face folders (``convert_hf``).

The classification heads return ``seqlab.models.ClassifierOutput``, as every classifier does; the old name
``ClassificationOutput`` still imports from here, with a FutureWarning, for one release.
"""

import warnings
from typing import Any

from seqlab.models.bert.heads import (
    BertForMaskedLM,
    BertForMeanPooledClassification,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertTaskModel,
    MaskedLMHead,
    MaskedLMOutput,
    PreTrainingOutput,
)
from seqlab.models.bert.model import Bert, BertConfig, BertOutput, bert, bert_base, bert_tiny
from seqlab.models.classifier import ClassifierOutput

__all__ = [
    "Bert",
    "BertConfig",
    "BertForMaskedLM",
    "BertForMeanPooledClassification",
    "BertForPreTraining",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertOutput",
    "BertTaskModel",
    "MaskedLMHead",
    "MaskedLMOutput",
    "PreTrainingOutput",
    "bert",
    "bert_base",
    "bert_tiny",
]


def __getattr__(name: str) -> Any:
    """``ClassificationOutput``, the old name of ``ClassifierOutput``, with a FutureWarning."""
    if name == "ClassificationOutput":
        warnings.warn(
            "seqlab.models.bert.ClassificationOutput is renamed seqlab.models.ClassifierOutput; the old name goes in "
            "the next release",
            FutureWarning,
            stacklevel=2,
        )
        return ClassifierOutput
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
