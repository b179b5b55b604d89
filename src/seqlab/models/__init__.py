"""Assembled models; each implements the decoding step interface and save_pretrained / from_pretrained."""

from seqlab.models.seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig, Seq2SeqOutput

__all__ = ["RNNSeq2Seq", "RNNSeq2SeqConfig", "Seq2SeqOutput"]
