import re

import pytest
import torch

from seqlab.data.streams import TokenStream, batchify_stream, stream_windows
from seqlab.errors import DataError

DOCUMENTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
T, F = True, False


def assert_equal(got, want):
    torch.testing.assert_close(got, torch.tensor(want, dtype=got.dtype), rtol=0, atol=0)


def test_batchify_lays_documents_into_contiguous_streams_with_document_starts():
    stream = batchify_stream(DOCUMENTS, 2)
    assert stream.tokens.dtype == torch.long and stream.resets.dtype == torch.bool
    assert_equal(stream.tokens, [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    assert_equal(stream.resets, [[T, F, F, T, F], [T, F, F, F, T]])


def test_batchify_drops_the_remainder_and_rows_may_start_inside_a_document():
    stream = batchify_stream(DOCUMENTS, 3)
    assert_equal(stream.tokens, [[1, 2, 3], [4, 5, 6], [7, 8, 9]])  # token 10 is dropped
    assert_equal(stream.resets, [[T, F, F], [T, F, T], [F, F, F]])


def test_batchify_accepts_tensors_and_tuples():
    stream = batchify_stream([torch.tensor([1, 2, 3]), (4, 5), [6, 7, 8, 9], torch.tensor([10])], 2)
    assert_equal(stream.tokens, [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])


def test_windows_give_inputs_next_token_targets_and_aligned_resets():
    windows = list(stream_windows(batchify_stream(DOCUMENTS, 2), 2))
    assert [w.start for w in windows] == [0, 2]
    assert_equal(windows[0].inputs, [[1, 2], [6, 7]])
    assert_equal(windows[0].targets, [[2, 3], [7, 8]])
    assert_equal(windows[0].resets, [[T, F], [T, F]])
    assert_equal(windows[1].inputs, [[3, 4], [8, 9]])
    assert_equal(windows[1].targets, [[4, 5], [9, 10]])
    assert_equal(windows[1].resets, [[F, T], [F, F]])


def test_last_window_is_shorter_and_windows_cover_every_input_once():
    stream = batchify_stream(DOCUMENTS, 2)
    windows = list(stream_windows(stream, 3))
    assert [(w.start, w.inputs.shape[1]) for w in windows] == [(0, 3), (3, 1)]
    assert_equal(windows[1].inputs, [[4], [9]])
    assert_equal(windows[1].targets, [[5], [10]])
    torch.testing.assert_close(torch.cat([w.inputs for w in windows], 1), stream.tokens[:, :-1], rtol=0, atol=0)
    torch.testing.assert_close(torch.cat([w.targets for w in windows], 1), stream.tokens[:, 1:], rtol=0, atol=0)


def test_stream_to_moves_both_tensors():
    stream = batchify_stream(DOCUMENTS, 2).to("cpu")
    assert isinstance(stream, TokenStream)
    assert stream.tokens.device.type == stream.resets.device.type == "cpu"


@pytest.mark.parametrize(
    ("documents", "batch_size", "message"),
    [
        (DOCUMENTS, 0, "batch_size (0) must be at least 1"),
        ([], 2, "cannot make a stream from an empty list of documents"),
        ([[1, 2], [], [3]], 1, "document 1 is empty; drop empty documents before batching"),
        ([[1, 2, 3], [4, 5]], 3, "5 tokens cannot fill 3 streams of at least 2 tokens (need >= 6)"),
    ],
)
def test_batchify_errors(documents, batch_size, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        batchify_stream(documents, batch_size)


def test_window_errors():
    stream = batchify_stream(DOCUMENTS, 2)
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match=rf"^bptt_len \({re.escape(repr(bad))}\) must be an integer >= 1$"):
            stream_windows(stream, bad)
    with pytest.raises(ValueError, match=r"^a stream needs at least 2 steps \(an input and its target\), got N = 1$"):
        stream_windows(TokenStream(stream.tokens[:, :1], stream.resets[:, :1]), 2)
    message = "stream tokens and resets must both be (B, N), got (2, 5) and (2, 4)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        stream_windows(TokenStream(stream.tokens, stream.resets[:, :4]), 2)


def test_a_corpus_too_small_for_the_streams_is_a_data_error():
    with pytest.raises(DataError, match=r"^5 tokens cannot fill 3 streams"):
        batchify_stream([[1, 2, 3], [4, 5]], 3)
