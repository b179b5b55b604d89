"""The sequence denoiser: frames read as one recurrent step each (against the layer run by hand), non-causal only
when bidirectional, and its one-line input errors."""

import pytest
import torch

from seqlab.models.denoiser import SequenceDenoiser, SequenceDenoiserConfig


def test_frames_are_recurrent_steps_and_the_head_maps_each_back_to_its_samples():
    torch.manual_seed(0)
    model = SequenceDenoiser(SequenceDenoiserConfig(frame_size=4, hidden_size=5, num_layers=1)).eval()
    x = torch.randn(2, 12, 1)
    h, _ = model.rnn(x.view(2, 3, 4))  # (B, T/F, 2H)
    expected = (h @ model.output.weight.T + model.output.bias).reshape(2, 12, 1)
    torch.testing.assert_close(model(x), expected)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_a_late_change_reaches_the_first_frame_only_when_bidirectional(bidirectional):
    torch.manual_seed(0)
    config = SequenceDenoiserConfig(frame_size=2, hidden_size=4, num_layers=2, bidirectional=bidirectional)
    model = SequenceDenoiser(config).eval()
    x = torch.randn(1, 10, 1)
    changed = x.clone()
    changed[0, -1] += 1.0
    first_frame_moved = not torch.equal(model(x)[0, :2], model(changed)[0, :2])
    assert first_frame_moved == bidirectional


def test_bad_inputs_are_one_line_errors():
    model = SequenceDenoiser(SequenceDenoiserConfig(frame_size=4, hidden_size=3))
    with pytest.raises(ValueError, match=r"^the series' length \(10\) must be a multiple of frame_size \(4\)$"):
        model(torch.zeros(1, 10, 1))
    with pytest.raises(ValueError, match=r"^x must be \(B, T, 1\) floating, got shape \(1, 8\) torch.float32$"):
        model(torch.zeros(1, 8))
