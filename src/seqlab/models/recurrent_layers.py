"""The recurrent layers a model config may name (``cell``: rnn | gru | gru_textbook | lstm) and how to build each.

"gru" is torch.nn.GRU's reset-after form (fused kernel); "gru_textbook" is the notes' form, r_t applied to h_{t-1}
before the recurrent matmul and h_t = (1 - z_t) * h_{t-1} + z_t * h~_t (``seqlab.nn.GRUCell(variant="textbook")``),
which always runs the reference loop.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Literal

from seqlab.nn.recurrent import GRU, LSTM, RNN

CellName = Literal["rnn", "gru", "gru_textbook", "lstm"]
RECURRENT_LAYERS: dict[str, Callable[..., RNN | GRU | LSTM]] = {
    "rnn": RNN,
    "gru": GRU,
    "gru_textbook": partial(GRU, variant="textbook"),
    "lstm": LSTM,
}
