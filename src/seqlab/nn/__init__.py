"""Building blocks: recurrent cells and layers, attention, pooling. No I/O, no training, no CLI."""

from seqlab.nn.attention import AdditiveAttention, Attention, AttentionOutput, BilinearAttention, DotProductAttention
from seqlab.nn.cells import GRUCell, LSTMCell, LSTMState, RNNCell
from seqlab.nn.layer_norm_cells import LayerNormGRUCell, LayerNormLSTMCell
from seqlab.nn.pooling import AttentionPooling, LastPooling, MaxPooling, MeanPooling, PoolingOutput, make_pooling
from seqlab.nn.recurrent import GRU, LSTM, RNN, RecurrentOutput

__all__ = [
    "GRU",
    "LSTM",
    "RNN",
    "AdditiveAttention",
    "Attention",
    "AttentionOutput",
    "AttentionPooling",
    "BilinearAttention",
    "DotProductAttention",
    "GRUCell",
    "LSTMCell",
    "LSTMState",
    "LastPooling",
    "LayerNormGRUCell",
    "LayerNormLSTMCell",
    "MaxPooling",
    "MeanPooling",
    "PoolingOutput",
    "RNNCell",
    "RecurrentOutput",
    "make_pooling",
]
