import pytest
import torch

from seqlab.data.blocks import Blocks, block_batches, num_blocks, random_blocks
from seqlab.errors import ConfigError, DataError

N, T, B = 50, 6, 8
# Distinct tokens, so a block's values show where it starts.
TOKENS = torch.arange(100, 100 + N)


def starts_of(blocks):
    return (blocks.inputs[:, 0] - 100).tolist()


def test_random_blocks_are_slices_with_targets_shifted_by_one():
    blocks = random_blocks(TOKENS, block_size=T, batch_size=B, generator=torch.Generator().manual_seed(0))
    assert isinstance(blocks, Blocks)
    assert blocks.inputs.shape == blocks.targets.shape == (B, T)
    assert blocks.inputs.dtype == torch.long
    for row, start in enumerate(starts_of(blocks)):
        assert 0 <= start <= N - T - 1  # the whole block and its last target lie inside the corpus
        torch.testing.assert_close(blocks.inputs[row], TOKENS[start : start + T], rtol=0, atol=0)
        torch.testing.assert_close(blocks.targets[row], TOKENS[start + 1 : start + T + 1], rtol=0, atol=0)


def test_random_blocks_draw_starts_as_nanogpt_does_and_reach_both_ends():
    generator = torch.Generator().manual_seed(3)
    blocks = random_blocks(TOKENS, block_size=T, batch_size=400, generator=generator)
    want = torch.randint(N - T, (400,), generator=torch.Generator().manual_seed(3))  # nanoGPT's get_batch
    assert starts_of(blocks) == want.tolist()
    assert set(starts_of(blocks)) == set(range(N - T))


def test_random_blocks_are_reproducible_with_a_fixed_generator():
    first = random_blocks(TOKENS, block_size=T, batch_size=B, generator=torch.Generator().manual_seed(7))
    again = random_blocks(TOKENS, block_size=T, batch_size=B, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(first.inputs, again.inputs, rtol=0, atol=0)


def test_a_corpus_of_exactly_one_block_works_and_one_token_less_is_refused():
    blocks = random_blocks(TOKENS[: T + 1], block_size=T, batch_size=2, generator=None)
    assert starts_of(blocks) == [0, 0]
    with pytest.raises(DataError) as error:
        random_blocks(TOKENS[:T], block_size=T, batch_size=2, generator=None)
    assert str(error.value) == (
        "the corpus has 6 tokens, too few for one block of block_size 6 (a block needs block_size + 1 = 7 tokens)"
    )
    with pytest.raises(DataError, match="the corpus has 6 tokens"):
        block_batches(TOKENS[:T], block_size=T, batch_size=2)


def test_bad_arguments_are_refused():
    with pytest.raises(ConfigError, match=r"block_size \(0\)"):
        random_blocks(TOKENS, block_size=0, batch_size=B, generator=None)
    with pytest.raises(DataError, match=r"1-D long tensor \(N,\), got shape \(2, 25\)"):
        random_blocks(TOKENS.view(2, 25), block_size=T, batch_size=B, generator=None)


def test_an_epoch_covers_every_non_overlapping_block_once():
    batches = list(block_batches(TOKENS, block_size=T, batch_size=3, generator=torch.Generator().manual_seed(0)))
    count = num_blocks(N, T)
    assert count == (N - 1) // T == 8
    assert [b.inputs.shape[0] for b in batches] == [3, 3, 2]  # the last batch is smaller
    starts = sorted(s for b in batches for s in starts_of(b))
    assert starts == [T * i for i in range(count)]
    for blocks in batches:
        torch.testing.assert_close(blocks.targets, blocks.inputs + 1, rtol=0, atol=0)


def test_an_epoch_without_a_generator_is_in_corpus_order_and_shuffling_is_reproducible():
    ordered = list(block_batches(TOKENS, block_size=T, batch_size=4))
    assert [starts_of(b) for b in ordered] == [[0, 6, 12, 18], [24, 30, 36, 42]]

    def shuffled(seed):
        generator = torch.Generator().manual_seed(seed)
        return [starts_of(b) for b in block_batches(TOKENS, block_size=T, batch_size=4, generator=generator)]

    one, two = shuffled(1), shuffled(1)
    assert one == two != [starts_of(b) for b in ordered]


def test_max_blocks_keeps_blocks_spread_evenly_over_the_corpus():
    # 8 blocks of 6 in 50 tokens (starts 0, 6, ..., 42); 3 of them: blocks floor(8k / 3) = 0, 2, 5.
    spread = list(block_batches(TOKENS, block_size=T, batch_size=2, max_blocks=3))
    assert [starts_of(b) for b in spread] == [[0, 12], [30]]
    everything = [starts_of(b) for b in block_batches(TOKENS, block_size=T, batch_size=4)]
    for max_blocks in (8, 100):
        assert [starts_of(b) for b in block_batches(TOKENS, block_size=T, batch_size=4, max_blocks=max_blocks)] == (
            everything
        )
    generator = torch.Generator().manual_seed(0)
    shuffled = block_batches(TOKENS, block_size=T, batch_size=4, generator=generator, max_blocks=3)
    assert sorted(start for b in shuffled for start in starts_of(b)) == [0, 12, 30]
    with pytest.raises(ConfigError, match=r"max_blocks"):
        block_batches(TOKENS, block_size=T, batch_size=4, max_blocks=0)
