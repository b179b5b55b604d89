import itertools
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from seqlab.data.batching import (
    BUCKET_BATCHES,
    Seq2SeqBatch,
    batch_iterator,
    check_token_batches,
    collate_seq2seq,
)
from seqlab.errors import ConfigError
from seqlab.training.objectives import teacher_forcing_loss


def test_collate_hand_built_example():
    pairs = [([5, 6, 7], [8]), ([9], [10, 11, 12]), ([3, 4], [])]
    batch = collate_seq2seq(pairs)
    assert_close(batch.src, torch.tensor([[5, 6, 7], [9, 0, 0], [3, 4, 0]]))
    assert_close(batch.src_lengths, torch.tensor([3, 1, 2]))
    assert_close(batch.tgt_in, torch.tensor([[1, 8, 0, 0], [1, 10, 11, 12], [1, 0, 0, 0]]))
    assert_close(batch.tgt_out, torch.tensor([[8, 2, 0, 0], [10, 11, 12, 2], [2, 0, 0, 0]]))
    assert_close(batch.tgt_lengths, torch.tensor([2, 4, 1]))
    assert_close(batch.indices, torch.tensor([0, 1, 2]))
    assert all(tensor.dtype == torch.long for tensor in batch)


def test_collate_custom_special_ids_and_indices():
    batch = collate_seq2seq([([4], [5, 6]), ([4, 4], [5])], pad_id=9, bos_id=7, eos_id=8, indices=[10, 3])
    assert_close(batch.src, torch.tensor([[4, 9], [4, 4]]))
    assert_close(batch.tgt_in, torch.tensor([[7, 5, 6], [7, 5, 9]]))
    assert_close(batch.tgt_out, torch.tensor([[5, 6, 8], [5, 8, 9]]))
    assert_close(batch.indices, torch.tensor([10, 3]))


def test_tgt_in_and_tgt_out_are_shifted_copies():
    rng = random.Random(0)
    pairs = [([1] * rng.randint(1, 6), [rng.randint(3, 20) for _ in range(rng.randint(0, 7))]) for _ in range(9)]
    batch = collate_seq2seq(pairs)
    real = torch.arange(batch.tgt_in.shape[1]) < batch.tgt_lengths.unsqueeze(1)  # (B, T)
    assert_close(batch.tgt_in[:, 1:][real[:, 1:]], batch.tgt_out[:, :-1][real[:, 1:]])
    assert_close(batch.tgt_out[real].eq(2).sum(), torch.tensor(len(pairs)))
    assert_close(batch.tgt_in[~real], torch.zeros(int((~real).sum()), dtype=torch.long))


def test_to_moves_every_tensor():
    batch = collate_seq2seq([([3], [4])]).to("meta")
    assert isinstance(batch, Seq2SeqBatch)
    assert all(tensor.device.type == "meta" for tensor in batch)


def test_collate_errors():
    with pytest.raises(ValueError, match=r"^cannot collate an empty list of pairs$"):
        collate_seq2seq([])
    with pytest.raises(ValueError, match=r"^pair 1 has an empty source sequence$"):
        collate_seq2seq([([3], [4]), ([], [4])])
    with pytest.raises(ValueError, match=r"^indices has 1 entries for 2 pairs$"):
        collate_seq2seq([([3], [4]), ([3], [4])], indices=[0])


def make_pairs(n, seed=0):
    rng = random.Random(seed)
    # The source's first id is the pair's number, so every batch row can be traced back.
    return [([i, *[3] * rng.randint(0, 9)], [rng.randint(3, 9) for _ in range(rng.randint(1, 5))]) for i in range(n)]


def epoch(pairs, **kwargs):
    return list(batch_iterator(pairs, **kwargs))


def assert_rows_match_pairs(batches, pairs):
    for batch in batches:
        expected = collate_seq2seq([pairs[i] for i in batch.indices.tolist()], indices=batch.indices.tolist())
        for got, want in zip(batch, expected, strict=True):
            assert_close(got, want)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("bucket", [False, True])
def test_every_pair_exactly_once(shuffle, bucket):
    pairs = make_pairs(103)
    batches = epoch(pairs, batch_size=8, shuffle=shuffle, bucket=bucket, generator=torch.Generator().manual_seed(0))
    assert [len(batch.indices) for batch in batches].count(8) == 12
    assert sorted(len(batch.indices) for batch in batches)[0] == 7
    assert sorted(torch.cat([batch.indices for batch in batches]).tolist()) == list(range(103))
    assert_rows_match_pairs(batches, pairs)


def test_no_shuffle_no_bucket_keeps_input_order():
    pairs = make_pairs(10)
    batches = epoch(pairs, batch_size=4, shuffle=False, bucket=False)
    assert [batch.indices.tolist() for batch in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_seeded_generator_gives_the_same_epoch():
    pairs = make_pairs(60)
    runs = [
        epoch(pairs, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(seed)) for seed in (1, 1, 2)
    ]
    assert [b.indices.tolist() for b in runs[0]] == [b.indices.tolist() for b in runs[1]]
    assert [b.indices.tolist() for b in runs[0]] != [b.indices.tolist() for b in runs[2]]


def test_bucketing_sorts_within_windows_and_reduces_padding():
    batch_size = 2
    pairs = make_pairs(batch_size * BUCKET_BATCHES * 2 + 1)
    kwargs = {"batch_size": batch_size, "generator": torch.Generator().manual_seed(0)}
    bucketed = epoch(pairs, shuffle=False, bucket=True, **kwargs)
    order = torch.cat([batch.indices for batch in bucketed])
    window = batch_size * BUCKET_BATCHES
    lengths = torch.tensor([len(pairs[i][0]) for i in order.tolist()])
    for start in range(0, len(pairs), window):
        chunk = lengths[start : start + window]
        assert_close(chunk, chunk.sort(descending=True).values)
        # Without shuffling a window holds exactly the pairs of that stretch of the input.
        assert sorted(order[start : start + window].tolist()) == list(range(start, min(start + window, len(pairs))))

    def padding(batches):
        return sum(int(batch.src.numel() - batch.src_lengths.sum()) for batch in batches)

    shuffled = epoch(pairs, shuffle=True, bucket=False, **kwargs)
    shuffled_bucketed = epoch(pairs, shuffle=True, bucket=True, **kwargs)
    assert padding(shuffled_bucketed) < padding(shuffled) / 4
    assert all((b.src_lengths[:-1] >= b.src_lengths[1:]).all() for b in shuffled_bucketed)


def test_batch_iterator_errors():
    with pytest.raises(ValueError, match=r"^batch_size \(0\) must be at least 1$"):
        batch_iterator(make_pairs(3), batch_size=0, shuffle=False)
    with pytest.raises(ValueError, match=r"^cannot batch an empty list of pairs$"):
        batch_iterator([], batch_size=2, shuffle=False)
    with pytest.raises(ValueError, match=r"^batch_type \('tokens'\) must be one of sentence, token$"):
        batch_iterator(make_pairs(3), batch_size=2, shuffle=False, batch_type="tokens")


PAIRS = st.lists(
    st.tuples(
        st.lists(st.integers(3, 20), min_size=1, max_size=9),  # a source is never empty
        st.lists(st.integers(3, 20), max_size=9),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=50, deadline=None)
@given(PAIRS, st.integers(1, 9), st.booleans(), st.booleans(), st.integers(0, 2**31 - 1))
def test_epoch_properties(pairs, batch_size, shuffle, bucket, seed):
    """Every pair once per epoch; each row holds its pair, its lengths, BOS/EOS, and pad_id everywhere else."""
    pad_id, bos_id, eos_id = 0, 1, 2
    batches = epoch(
        pairs, batch_size=batch_size, shuffle=shuffle, bucket=bucket, generator=torch.Generator().manual_seed(seed)
    )
    indices = [i for batch in batches for i in batch.indices.tolist()]
    assert sorted(indices) == list(range(len(pairs)))
    sizes = sorted(len(batch.indices) for batch in batches)
    assert sizes[1:] == [batch_size] * (len(batches) - 1) and 1 <= sizes[0] <= batch_size
    for batch in batches:
        rows = batch.indices.tolist()
        assert batch.src.shape[1] == max(len(pairs[i][0]) for i in rows)
        assert batch.tgt_in.shape[1] == batch.tgt_out.shape[1] == max(len(pairs[i][1]) for i in rows) + 1
        for b, i in enumerate(rows):
            source, target = pairs[i]
            S, n = len(source), len(target)
            assert batch.src_lengths[b] == S and batch.tgt_lengths[b] == n + 1
            assert batch.src[b, :S].tolist() == source
            assert batch.tgt_in[b, : n + 1].tolist() == [bos_id, *target]
            assert batch.tgt_out[b, : n + 1].tolist() == [*target, eos_id]
            assert (batch.src[b, S:] == pad_id).all()
            assert (batch.tgt_in[b, n + 1 :] == pad_id).all() and (batch.tgt_out[b, n + 1 :] == pad_id).all()


def test_token_batches_refuse_a_target_longer_than_the_batch():
    pairs = [([3], [4, 5]), ([3], [4, 5, 6, 7])]  # 3 and 5 target tokens with EOS
    message = r"^batch_size \(4 target tokens a batch, batch_type 'token'\) is below the longest target \(5 tokens"
    with pytest.raises(ConfigError, match=message):
        batch_iterator(pairs, batch_size=4, shuffle=False, batch_type="token")
    check_token_batches(pairs, batch_size=5, batch_type="token")
    check_token_batches(pairs, batch_size=1, batch_type="sentence")  # pairs always fit


@settings(max_examples=50, deadline=None)
@given(PAIRS, st.integers(10, 40), st.booleans(), st.booleans(), st.integers(0, 2**31 - 1))
def test_token_batches_hold_at_most_batch_size_tokens_and_every_pair_once(pairs, batch_size, shuffle, bucket, seed):
    """Each batch's target tokens (EOS included) are at most batch_size, every batch but the last is too full for
    the next pair in line (so it holds more than batch_size minus the longest target), and every pair appears once
    per epoch, in the row that holds it."""
    batches = epoch(
        pairs,
        batch_size=batch_size,
        shuffle=shuffle,
        bucket=bucket,
        batch_type="token",
        generator=torch.Generator().manual_seed(seed),
    )
    assert sorted(i for batch in batches for i in batch.indices.tolist()) == list(range(len(pairs)))
    tokens = [int(batch.tgt_lengths.sum()) for batch in batches]
    assert max(tokens) <= batch_size
    if not (shuffle and bucket):  # batches in packing order: each was closed by the pair that opens the next
        for batch, following in itertools.pairwise(batches):
            assert int(batch.tgt_lengths.sum() + following.tgt_lengths[0]) > batch_size
    assert_rows_match_pairs(batches, pairs)


def test_token_batches_bucket_like_sentence_batches():
    """Pairs sorted by source length within windows of about BUCKET_BATCHES batches: less padding than unsorted
    (a batch may straddle two windows, so that every batch but the epoch's last is full)."""
    pairs = make_pairs(600)
    kwargs = {"batch_size": 24, "batch_type": "token", "generator": torch.Generator().manual_seed(0)}

    def padding(batches):
        return sum(int(batch.src.numel() - batch.src_lengths.sum()) for batch in batches)

    bucketed = epoch(pairs, shuffle=True, bucket=True, **kwargs)
    assert padding(bucketed) < padding(epoch(pairs, shuffle=True, bucket=False, **kwargs)) / 2


def table_loss(table: torch.Tensor, batch: Seq2SeqBatch) -> torch.Tensor:
    """``teacher_forcing_loss`` of a model whose logits for pair i at step t are ``table[i, t]``."""

    class Output:
        def __init__(self, logits):
            self.logits = logits

    def model(src, src_lengths, tgt_in):
        return Output(table[src[:, 0], : tgt_in.shape[1]])  # (B, T, V)

    return teacher_forcing_loss(model, batch).loss


@pytest.mark.parametrize("batch_type", ["sentence", "token"])
def test_token_batches_weigh_every_token_alike(batch_type):
    """An epoch of steps, each the mean loss over its batch's tokens, descends the mean over all the epoch's
    tokens (each token weighed alike, brute force) when every token batch is full; sentence batches grouped by
    length do not: a token of a long pair weighs less than one of a short pair."""
    # 6 pairs of 4 target tokens and 12 of 2: token batches of 8 are exactly full (long pairs sorted first);
    # sentence batches of 3 hold 12 tokens (long pairs) or 6 (short pairs).
    pairs = [([i, *[3] * (5 if i < 6 else 1)], [5, 6, 7] if i < 6 else [5]) for i in range(18)]
    size = {"sentence": 3, "token": 8}[batch_type]
    batches = epoch(pairs, batch_size=size, shuffle=False, batch_type=batch_type)
    tokens = [int(batch.tgt_lengths.sum()) for batch in batches]
    assert tokens == ([8] * 6 if batch_type == "token" else [12, 12, 6, 6, 6, 6])
    table = torch.randn(18, 4, 9, generator=torch.Generator().manual_seed(0)).log_softmax(-1)  # (pairs, T, V)
    per_step = torch.stack([table_loss(table, batch) for batch in batches]).mean()
    token_nll = [-table[i, t, target] for i, (_, y) in enumerate(pairs) for t, target in enumerate([*y, 2])]
    brute_force = torch.stack(token_nll).mean()
    if batch_type == "token":
        assert_close(per_step, brute_force)
    else:
        assert not torch.allclose(per_step, brute_force, atol=1e-3)
