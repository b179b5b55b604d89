"""The recurrent layers a model config may name (``cell``: rnn | gru | lstm) and the ``seqlab.nn`` class of each."""

from __future__ import annotations

from typing import Literal

from seqlab.nn.recurrent import GRU, LSTM, RNN

CellName = Literal["rnn", "gru", "lstm"]
RECURRENT_LAYERS: dict[str, type[RNN] | type[GRU] | type[LSTM]] = {"rnn": RNN, "gru": GRU, "lstm": LSTM}
