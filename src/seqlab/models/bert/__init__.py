"""BERT (Devlin et al., 2019): the bidirectional Transformer encoder body (``model``), its pre-training and
fine-tuning heads (``heads``), and Hugging Face folders (``convert_hf``)."""

from seqlab.models.bert.heads import (
    BertForMaskedLM,
    BertForMeanPooledClassification,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertTaskModel,
    ClassificationOutput,
    MaskedLMHead,
    MaskedLMOutput,
    PreTrainingOutput,
)
from seqlab.models.bert.model import Bert, BertConfig, BertOutput, bert, bert_base, bert_tiny

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
    "ClassificationOutput",
    "MaskedLMHead",
    "MaskedLMOutput",
    "PreTrainingOutput",
    "bert",
    "bert_base",
    "bert_tiny",
]
