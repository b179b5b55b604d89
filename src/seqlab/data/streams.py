"""Token streams for language modelling with truncated BPTT: documents laid into B parallel streams.

The classic LM batching (Zaremba et al., 2014; the PyTorch word_language_model example): the documents are
concatenated into one sequence of M tokens, cut into B contiguous pieces of N = M // B tokens (the last
M - B*N tokens are dropped), and stacked into a (B, N) matrix whose row b continues from one window to the
next, so a recurrent state can be carried across windows. For documents [1 2 3] [4 5] [6 7 8 9] [10] and B = 2:

    tokens = [[1 2 3 4  5]        resets = [[T F F T F]
              [6 7 8 9 10]]                  [T F F F T]]

``resets`` is True at the first token of each document: the state entering that token must be zero. A row
usually starts inside a document (row 1 above could start mid-way through [4 5 6 ...]); there the caller's
initial state, normally zeros, stands in for the unseen context.

Windows of ``bptt_len`` steps read inputs tokens[:, t:t+k] and targets tokens[:, t+1:t+k+1] (next tokens).
Targets cross document boundaries: the last token of a document (typically EOS) is trained to predict the
first token of the next, as in the classic setup.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.errors import DataError


class TokenStream(NamedTuple):
    """B parallel token streams (see the module docstring).

    Fields:
        tokens: (B, N) long, token ids; row b is the b-th contiguous piece of the concatenated documents.
        resets: (B, N) bool, True at the first token of each document (the state entering it must be zero).
    """

    tokens: Tensor
    resets: Tensor

    def to(self, device: torch.device | str) -> TokenStream:
        """The same stream with both tensors on ``device``."""
        return TokenStream(self.tokens.to(device), self.resets.to(device))


class StreamWindow(NamedTuple):
    """One window of k <= bptt_len steps of a ``TokenStream``, starting at step ``start``.

    Fields:
        inputs: (B, k) long, tokens[:, start:start+k].
        targets: (B, k) long, tokens[:, start+1:start+k+1], the next token of every input.
        resets: (B, k) bool, resets[:, start:start+k], aligned with ``inputs``.
        start: the step (column of the stream) of the window's first input.
    """

    inputs: Tensor
    targets: Tensor
    resets: Tensor
    start: int


def batchify_stream(documents: Sequence[Sequence[int]], batch_size: int) -> TokenStream:
    """Concatenate ``documents`` and lay them into ``batch_size`` parallel streams (module docstring).

    Args:
        documents: token-id sequences (lists, tuples or 1-D integer tensors), in reading order.
        batch_size: B, the number of parallel streams.
    Returns:
        TokenStream with tokens and resets of shape (B, N), N = (total tokens) // B.
    Raises:
        ValueError: if batch_size < 1, there are no documents, or a document is empty.
        DataError (a ValueError): if there are fewer than 2 * batch_size tokens (every stream needs an input and a
            target, so the corpus is too small); the message shows both numbers.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size ({batch_size}) must be at least 1")
    if len(documents) == 0:
        raise ValueError("cannot make a stream from an empty list of documents")
    lengths = [len(document) for document in documents]
    for index, length in enumerate(lengths):
        if length == 0:
            raise ValueError(f"document {index} is empty; drop empty documents before batching")
    total = sum(lengths)
    if total < 2 * batch_size:
        raise DataError(
            f"{total} tokens cannot fill {batch_size} streams of at least 2 tokens (need >= {2 * batch_size})"
        )
    tokens = torch.cat([torch.as_tensor(document, dtype=torch.long).flatten() for document in documents])  # (M,)
    resets = torch.zeros(total, dtype=torch.bool)
    starts = torch.tensor([0, *lengths[:-1]]).cumsum(0)  # (number of documents,)
    resets[starts] = True
    N = total // batch_size
    return TokenStream(
        tokens[: batch_size * N].view(batch_size, N),  # (B, N)
        resets[: batch_size * N].view(batch_size, N),  # (B, N)
    )


def stream_windows(stream: TokenStream, bptt_len: int) -> Iterator[StreamWindow]:
    """Consecutive windows of ``bptt_len`` steps over the stream's N - 1 input steps.

    The last window is shorter when bptt_len does not divide N - 1; the last token of each row is only a
    target.

    Args:
        stream: a ``TokenStream`` with N >= 2 steps.
        bptt_len: k, steps per window (k1 of truncated BPTT).
    Returns:
        An iterator over ceil((N - 1) / bptt_len) ``StreamWindow``.
    Raises:
        ValueError: at the call if bptt_len < 1 or the stream has fewer than 2 steps, or if tokens and resets
            differ in shape.
    """
    if isinstance(bptt_len, bool) or not isinstance(bptt_len, int) or bptt_len < 1:
        raise ValueError(f"bptt_len ({bptt_len!r}) must be an integer >= 1")
    if stream.tokens.dim() != 2 or stream.tokens.shape != stream.resets.shape:
        raise ValueError(
            f"stream tokens and resets must both be (B, N), got {tuple(stream.tokens.shape)} "
            f"and {tuple(stream.resets.shape)}"
        )
    N = stream.tokens.shape[1]
    if N < 2:
        raise ValueError(f"a stream needs at least 2 steps (an input and its target), got N = {N}")

    def windows() -> Iterator[StreamWindow]:
        for start in range(0, N - 1, bptt_len):
            end = min(start + bptt_len, N - 1)
            yield StreamWindow(
                stream.tokens[:, start:end],
                stream.tokens[:, start + 1 : end + 1],
                stream.resets[:, start:end],
                start,
            )

    return windows()
