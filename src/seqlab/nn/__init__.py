"""Building blocks: recurrent cells and layers, attention. No I/O, no training, no CLI."""

from seqlab.nn.attention import (
    AdditiveAttention,
    Attention,
    AttentionOutput,
    BilinearAttention,
    DotProductAttention,
)
from seqlab.nn.cells import GRUCell, LSTMCell, LSTMState, RNNCell
from seqlab.nn.recurrent import GRU, LSTM, RNN, RecurrentOutput

__all__ = [
    "GRU",
    "LSTM",
    "RNN",
    "AdditiveAttention",
    "Attention",
    "AttentionOutput",
    "BilinearAttention",
    "DotProductAttention",
    "GRUCell",
    "LSTMCell",
    "LSTMState",
    "RNNCell",
    "RecurrentOutput",
]
