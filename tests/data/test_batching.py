import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from seqlab.data.batching import BUCKET_BATCHES, Seq2SeqBatch, batch_iterator, collate_seq2seq


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
