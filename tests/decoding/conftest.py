"""Tiny deterministic StepModels for the decoding tests, and a teacher-forced scorer.

``toy`` runs each test on both: a GRU decoder whose state is a (B, H) tensor (an RNN seq2seq decoder), and a
model whose state is a NamedTuple holding a growing (B, t) prefix, like a Transformer's KV cache.
"""

from typing import NamedTuple

import pytest
import torch
from torch import Tensor, nn

from seqlab.decoding.interface import SearchOutput, StepOutput, select_rows


class GRUToy:
    """Embedding -> torch.nn.GRUCell -> linear head, V = 4; state h (B, H), from a random h_0 per row."""

    vocab_size, bos_id, eos_id = 4, 1, 0

    def __init__(self, hidden_size: int = 5, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.embedding = nn.Embedding(self.vocab_size, 3).double()
        self.cell = nn.GRUCell(3, hidden_size).double()
        self.head = nn.Linear(hidden_size, self.vocab_size).double()
        nn.init.normal_(self.head.weight, std=2.0)  # peaked distributions, so EOS often wins
        self.h0 = torch.randn(8, hidden_size, dtype=torch.float64)

    def initial_state(self, rows: list[int]) -> Tensor:
        return self.h0[rows]

    def step(self, tokens: Tensor, state: Tensor) -> StepOutput:
        h = self.cell(self.embedding(tokens), state)
        return StepOutput(self.head(h), h)

    def reorder_state(self, state: Tensor, index: Tensor) -> Tensor:
        return select_rows(state, index)


class CacheState(NamedTuple):
    row: Tensor  # (B,) which input each row decodes
    prefix: Tensor  # (B, t) tokens fed so far, grows every step like a KV cache


class CacheToy:
    """logits = bias[row] + sum_i table[i, prefix_i], V = 3: depends on the row and on the whole prefix."""

    vocab_size, bos_id, eos_id = 3, 2, 0

    def __init__(self, max_length: int = 8, seed: int = 7, eos_bonus: float = 0.0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.bias = torch.randn(8, self.vocab_size, generator=g, dtype=torch.float64) * 1.5
        self.bias[:, self.eos_id] += eos_bonus
        self.table = torch.randn(max_length, self.vocab_size, self.vocab_size, generator=g, dtype=torch.float64)

    def initial_state(self, rows: list[int]) -> CacheState:
        return CacheState(torch.tensor(rows), torch.zeros(len(rows), 0, dtype=torch.long))

    def step(self, tokens: Tensor, state: CacheState) -> StepOutput:
        prefix = torch.cat([state.prefix, tokens.unsqueeze(1)], dim=1)  # (B, t)
        positions = torch.arange(prefix.shape[1])
        logits = self.bias[state.row] + self.table[positions, prefix].sum(dim=1)  # (B, t, V) summed over t
        return StepOutput(logits, CacheState(state.row, prefix))

    def reorder_state(self, state: CacheState, index: Tensor) -> CacheState:
        return select_rows(state, index)


@pytest.fixture(params=["gru", "cache"])
def toy(request):
    return GRUToy() if request.param == "gru" else CacheToy()


@pytest.fixture
def cache_toy_factory():
    return CacheToy


def _teacher_forced(model, rows: list[int], output: SearchOutput) -> Tensor:
    """(B, K) sum of log p(y_i | y_<i) of each hypothesis, fed token by token to a fresh single-row state."""
    sums = torch.zeros(output.lengths.shape, dtype=torch.float64)
    for b, row in enumerate(rows):
        for k in range(output.lengths.shape[1]):
            state, token = model.initial_state([row]), torch.tensor([model.bos_id])
            for y in output.tokens[b, k, : output.lengths[b, k]].tolist():
                logits, state = model.step(token, state)
                sums[b, k] += torch.log_softmax(logits[0], dim=-1)[y]
                token = torch.tensor([y])
    return sums


@pytest.fixture
def teacher_forced():
    return _teacher_forced
