"""Assembled models; each implements save_pretrained / from_pretrained, and generators the decoding step interface."""

from seqlab.models.classifier import ClassifierOutput, Seq2VecClassifier, Seq2VecClassifierConfig
from seqlab.models.interfaces import Seq2SeqOutput, StepModel, StepOutput, select_rows
from seqlab.models.seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig, TransformerSeq2Seq, TransformerSeq2SeqConfig

__all__ = [
    "ClassifierOutput",
    "RNNSeq2Seq",
    "RNNSeq2SeqConfig",
    "Seq2SeqOutput",
    "Seq2VecClassifier",
    "Seq2VecClassifierConfig",
    "StepModel",
    "StepOutput",
    "TransformerSeq2Seq",
    "TransformerSeq2SeqConfig",
    "select_rows",
]
