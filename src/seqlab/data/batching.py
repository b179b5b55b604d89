"""Padded batches for sequence-to-sequence training, with bucketing by source length, of a number of pairs or of
target tokens.

A pair is (source ids, target ids) without BOS/EOS. Teacher forcing (Williams & Zipser, 1989) feeds the
decoder the shifted target: for y = y_1 .. y_n the decoder reads tgt_in = [BOS, y_1 .. y_n] and predicts
tgt_out = [y_1 .. y_n, EOS], both of length n + 1.

A batch's loss is the mean over its own target tokens, so when batches are grouped by length a token weighs
1 / (tokens in its batch) in its step: with batches of B pairs, a token of a long pair weighs less than one of a
short pair. Batches of about the same number of target tokens (``batch_type="token"``: JoeyNMT's batch type,
fairseq's ``--max-tokens``; Ott et al. 2018) give every token about the same weight.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from seqlab.errors import ConfigError

# Bucketing sorts pairs by source length within windows of this many batches: long enough to group similar
# lengths (less padding), short enough that the epoch order stays random.
BUCKET_BATCHES = 50

BatchType = Literal["sentence", "token"]
BATCH_TYPES: tuple[BatchType, ...] = ("sentence", "token")


class Seq2SeqBatch(NamedTuple):
    """A padded batch of (source, target) pairs; padding positions hold ``pad_id``.

    Fields:
        src: (B, S) long, source ids.  src_lengths: (B,) long, real source steps.
        tgt_in: (B, T) long, [BOS] + y (decoder input).  tgt_out: (B, T) long, y + [EOS] (prediction targets).
        tgt_lengths: (B,) long, len(y) + 1, real steps of tgt_in and tgt_out.
        indices: (B,) long, position of each pair in the list it came from, to put predictions back in order.
    """

    src: Tensor
    src_lengths: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    tgt_lengths: Tensor
    indices: Tensor

    def to(self, device: torch.device | str) -> Seq2SeqBatch:
        """The same batch with every tensor on ``device``."""
        return Seq2SeqBatch(*(tensor.to(device) for tensor in self))


def collate_seq2seq(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
    indices: Sequence[int] | None = None,
) -> Seq2SeqBatch:
    """Pad encoded (source, target) pairs into a batch, adding BOS/EOS to the target (module docstring).

    Args:
        pairs: B pairs of source ids and target ids, without BOS/EOS.
        pad_id, bos_id, eos_id: special ids (seqlab's Vocabulary uses 0, 1, 2).
        indices: the pairs' positions in the caller's list (default 0 .. B-1), returned as ``batch.indices``.
    Returns:
        Seq2SeqBatch with S = longest source and T = longest target + 1.
    Raises:
        ValueError: if ``pairs`` is empty, a source is empty, or ``indices`` has a length other than B.
    """
    if not pairs:
        raise ValueError("cannot collate an empty list of pairs")
    B = len(pairs)
    if indices is None:
        indices = range(B)
    elif len(indices) != B:
        raise ValueError(f"indices has {len(indices)} entries for {B} pairs")
    src_lengths = torch.tensor([len(source) for source, _ in pairs], dtype=torch.long)  # (B,)
    tgt_lengths = torch.tensor([len(target) + 1 for _, target in pairs], dtype=torch.long)  # (B,)
    if (src_lengths == 0).any():
        empty = int((src_lengths == 0).nonzero()[0])
        raise ValueError(f"pair {empty} has an empty source sequence")
    src = torch.full((B, int(src_lengths.max())), pad_id, dtype=torch.long)  # (B, S)
    tgt_in = torch.full((B, int(tgt_lengths.max())), pad_id, dtype=torch.long)  # (B, T)
    tgt_out = tgt_in.clone()  # (B, T)
    for b, (source, target) in enumerate(pairs):
        n = len(target)
        src[b, : len(source)] = torch.as_tensor(source, dtype=torch.long)
        tgt_in[b, 0] = bos_id
        tgt_in[b, 1 : n + 1] = torch.as_tensor(target, dtype=torch.long)
        tgt_out[b, :n] = tgt_in[b, 1 : n + 1]
        tgt_out[b, n] = eos_id
    return Seq2SeqBatch(src, src_lengths, tgt_in, tgt_out, tgt_lengths, torch.as_tensor(indices, dtype=torch.long))


def _pack(order: Tensor, sizes: Tensor, budget: int) -> list[Tensor]:
    """Consecutive runs of ``order`` whose ``sizes`` sum to at most ``budget`` each, cut greedily (no size is over)."""
    batches, start, total = [], 0, 0
    for i, size in enumerate(sizes[order].tolist()):
        if total + size > budget:
            batches.append(order[start:i])
            start, total = i, 0
        total += size
    batches.append(order[start:])
    return batches


def _batch_order(
    src_lengths: Tensor,
    sizes: Tensor,
    *,
    batch_size: int,
    shuffle: bool,
    generator: torch.Generator | None,
    bucket: bool,
) -> list[Tensor]:
    """Batches of indices into the pairs, each of total ``sizes`` at most ``batch_size``: optionally shuffled, then
    sorted by source length within windows of ``BUCKET_BATCHES`` batches' worth."""
    n = len(src_lengths)
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)  # (n,)
    if bucket:
        window = (sizes[order].cumsum(0) - 1) // (batch_size * BUCKET_BATCHES)  # (n,) each pair's window
        chunks = order.split(torch.unique_consecutive(window, return_counts=True)[1].tolist())
        order = torch.cat(
            [chunk[torch.sort(src_lengths[chunk], descending=True, stable=True).indices] for chunk in chunks]
        )
    batches = _pack(order, sizes, batch_size)
    if shuffle and bucket:
        # Sorting made each window run long-to-short; shuffle whole batches so lengths mix across the epoch.
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


def batch_iterator(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    batch_size: int,
    shuffle: bool,
    generator: torch.Generator | None = None,
    bucket: bool = True,
    batch_type: BatchType = "sentence",
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
) -> Iterator[Seq2SeqBatch]:
    """One epoch of padded batches; every pair appears in exactly one batch.

    ``batch_type`` says what ``batch_size`` counts: "sentence", pairs (each batch has ``batch_size`` of them, the
    last one fewer); "token", target tokens len(y) + 1 (EOS included, the tokens the loss averages over): pairs are
    added to a batch in order while its tokens stay at most ``batch_size``, so every batch but the last holds more
    than ``batch_size`` minus the longest target's tokens (module docstring).

    With ``shuffle`` the pairs are permuted by ``torch.randperm(generator=generator)`` (the global generator
    if None), so a seeded generator gives the same epoch every time. With ``bucket`` the pairs are sorted by
    source length, longest first, within windows of ``BUCKET_BATCHES`` batches, so a batch holds similar
    lengths and little padding; when also shuffling, the batch order is then shuffled. Without either, batches
    follow the input order. ``batch.indices`` gives each row's position in ``pairs``. The windows hold
    ``BUCKET_BATCHES * batch_size`` pairs, or as many pairs as fill that many target tokens.

    Args:
        pairs: encoded (source ids, target ids) without BOS/EOS, as for :func:`collate_seq2seq`.
        batch_size: pairs per batch, or target tokens per batch at most (``batch_type``).
        shuffle: permute the pairs (training) or keep a fixed order (evaluation).
        generator: source of randomness for ``shuffle``.
        bucket: group pairs of similar source length.
        batch_type: "sentence" or "token", the unit of ``batch_size``.
        pad_id, bos_id, eos_id: passed to :func:`collate_seq2seq`.
    Returns:
        An iterator over the epoch's Seq2SeqBatch: ceil(len(pairs) / batch_size) of them for "sentence".
    Raises:
        ValueError: at the call if ``batch_size`` < 1, ``pairs`` is empty or ``batch_type`` unknown; while
            iterating, as :func:`collate_seq2seq` (an empty source).
        ConfigError: (a ValueError) at the call, for "token" batches if a target has more tokens than
            ``batch_size`` (:func:`check_token_batches`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size ({batch_size}) must be at least 1")
    if not pairs:
        raise ValueError("cannot batch an empty list of pairs")
    if batch_type not in BATCH_TYPES:
        raise ValueError(f"batch_type ({batch_type!r}) must be one of {', '.join(BATCH_TYPES)}")
    src_lengths = torch.tensor([len(source) for source, _ in pairs], dtype=torch.long)  # (n,)
    if batch_type == "token":
        check_token_batches(pairs, batch_size=batch_size, batch_type=batch_type)
        sizes = torch.tensor([len(target) + 1 for _, target in pairs], dtype=torch.long)  # (n,) tokens incl. EOS
    else:
        sizes = torch.ones_like(src_lengths)
    batches = _batch_order(
        src_lengths, sizes, batch_size=batch_size, shuffle=shuffle, generator=generator, bucket=bucket
    )

    def batches_of_pairs() -> Iterator[Seq2SeqBatch]:
        for batch in batches:
            rows = batch.tolist()
            yield collate_seq2seq([pairs[i] for i in rows], pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, indices=rows)

    return batches_of_pairs()


def check_token_batches(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, batch_size: int, batch_type: BatchType
) -> None:
    """Check that every pair fits in a batch of ``batch_size`` target tokens when ``batch_type`` is "token" (a
    recipe calls it with its micro-batch size before training starts; nothing to check for "sentence").

    Raises:
        ConfigError: (a ValueError) if a target has more tokens (len(y) + 1) than ``batch_size``; the message shows
            both numbers.
    """
    if batch_type != "token":
        return
    longest = max(len(target) + 1 for _, target in pairs)
    if longest > batch_size:
        raise ConfigError(
            f"batch_size ({batch_size} target tokens a batch, batch_type 'token') is below the longest target "
            f"({longest} tokens with EOS)"
        )
