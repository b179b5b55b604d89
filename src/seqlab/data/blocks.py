"""Fixed-length blocks of a token corpus for training a GPT (decoder-only Transformer).

The corpus is one 1-D tensor of N token ids (documents concatenated, separated by EOS where the tokenizer has
one). A block of ``block_size`` = T tokens starting at i gives inputs tokens[i : i+T] and targets
tokens[i+1 : i+T+1], the next token at every position, so a block needs T + 1 tokens and the valid starts are
0 .. N - T - 1.

- ``random_blocks``: B starts drawn uniformly with replacement, as nanoGPT's ``get_batch`` does
  (``torch.randint(len(data) - block_size, (batch_size,))``); training by iterations rather than epochs.
- ``block_batches``: one epoch over the (N - 1) // T non-overlapping blocks starting at 0, T, 2T, ..., in an order
  shuffled by ``generator`` (or in corpus order without one), B blocks per batch, the last batch smaller; every
  input token of those blocks is seen exactly once. ``max_blocks`` keeps K of them spread evenly over the corpus
  (a validation sample of the whole split rather than of its beginning).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.errors import DataError
from seqlab.validation import check_int


class Blocks(NamedTuple):
    """A batch of blocks.

    Fields:
        inputs: (B, T) long, tokens[i : i+T] for each block start i.
        targets: (B, T) long, tokens[i+1 : i+T+1], the next token of every input.
    """

    inputs: Tensor
    targets: Tensor


def _check_corpus(tokens: Tensor, block_size: int, batch_size: int) -> int:
    """Validate the arguments and return N. Raises: ConfigError, DataError (module functions)."""
    check_int("block_size", block_size, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    if tokens.dim() != 1 or tokens.dtype != torch.long:
        raise DataError(f"tokens must be a 1-D long tensor (N,), got shape {tuple(tokens.shape)} and {tokens.dtype}")
    N = tokens.shape[0]
    if block_size + 1 > N:
        raise DataError(
            f"the corpus has {N} tokens, too few for one block of block_size {block_size} "
            f"(a block needs block_size + 1 = {block_size + 1} tokens)"
        )
    return N


def _gather(tokens: Tensor, starts: Tensor, block_size: int) -> Blocks:
    """Blocks at ``starts`` (B,) as one gather rather than B slices."""
    positions = starts[:, None] + torch.arange(block_size + 1, device=tokens.device)  # (B, T + 1)
    window = tokens[positions]  # (B, T + 1)
    return Blocks(window[:, :-1], window[:, 1:])


def random_blocks(tokens: Tensor, *, block_size: int, batch_size: int, generator: torch.Generator | None) -> Blocks:
    """B blocks at starts drawn uniformly from 0 .. N - T - 1, with replacement (nanoGPT's ``get_batch``).

    Args:
        tokens: (N,) long, the corpus.
        block_size: T, input tokens per block.
        batch_size: B, blocks per batch.
        generator: the source of randomness (on the device of ``tokens``); None uses torch's global one.
    Returns:
        Blocks with inputs and targets (B, T) on the device of ``tokens``.
    Raises:
        ConfigError: if block_size or batch_size < 1.
        DataError: if tokens is not (N,) long, or N < block_size + 1 (the message shows both numbers).
    """
    N = _check_corpus(tokens, block_size, batch_size)
    starts = torch.randint(N - block_size, (batch_size,), generator=generator, device=tokens.device)  # (B,)
    return _gather(tokens, starts, block_size)


def num_blocks(num_tokens: int, block_size: int) -> int:
    """Non-overlapping blocks of ``block_size`` in a corpus of ``num_tokens``: (N - 1) // T."""
    return max(num_tokens - 1, 0) // block_size


def block_batches(
    tokens: Tensor,
    *,
    block_size: int,
    batch_size: int,
    generator: torch.Generator | None = None,
    max_blocks: int | None = None,
) -> Iterator[Blocks]:
    """One epoch over the non-overlapping blocks starting at 0, T, 2T, ... (module docstring).

    Args:
        tokens: (N,) long, the corpus.
        block_size: T, input tokens per block.
        batch_size: B, blocks per batch; the last batch has (number of blocks) mod B blocks when that is not 0.
        generator: shuffles the order of the blocks (a CPU generator); None keeps corpus order.
        max_blocks: K, at most this many of the C = (N - 1) // T blocks, spread evenly over the corpus: blocks
            floor(k C / K) for k = 0 .. K - 1 (all C when K >= C); None for all C.
    Returns:
        An iterator over ceil(min(K, C) / B) Blocks, inputs and targets (B, T) on the device of ``tokens``.
    Raises:
        ConfigError, DataError: at the call, as ``random_blocks``; ConfigError if max_blocks is not None or an
            integer >= 1.
    """
    N = _check_corpus(tokens, block_size, batch_size)
    check_int("max_blocks", max_blocks, minimum=1, optional=True)
    count = num_blocks(N, block_size)
    kept = torch.arange(count)
    if max_blocks is not None and max_blocks < count:
        kept = torch.arange(max_blocks) * count // max_blocks  # (K,) block indices, evenly spread
    order = kept[torch.randperm(len(kept), generator=generator)] if generator is not None else kept
    starts = (order * block_size).to(tokens.device)  # (number of blocks,)
    count = len(starts)

    def batches() -> Iterator[Blocks]:
        for first in range(0, count, batch_size):
            yield _gather(tokens, starts[first : first + batch_size], block_size)

    return batches()
