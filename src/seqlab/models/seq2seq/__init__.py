"""Encoder-decoders: the RNN seq2seq with attention or a fixed context, and the Transformer seq2seq."""

from seqlab.models.seq2seq.rnn import AttentionName, RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.models.seq2seq.transformer import (
    AttentionKind,
    PositionalName,
    TransformerSeq2Seq,
    TransformerSeq2SeqConfig,
)

__all__ = [
    "AttentionKind",
    "AttentionName",
    "PositionalName",
    "RNNSeq2Seq",
    "RNNSeq2SeqConfig",
    "TransformerSeq2Seq",
    "TransformerSeq2SeqConfig",
]
