"""RNNSequenceTagger: y_t = W_y h_t + b_y at every step, against torch.nn.LSTM and a hand-written per-step loop."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from seqlab.models.tagger import RNNSequenceTagger, RNNSequenceTaggerConfig, TaggerOutput

V, K, E, H = 10, 4, 3, 5
LENGTHS = [4, 2, 6]  # unsorted, padding in rows 0 and 1


@pytest.fixture(autouse=True)
def _float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def make(**options):
    torch.manual_seed(0)
    config = RNNSequenceTaggerConfig(V, K, embedding_size=E, hidden_size=H, **options)
    return RNNSequenceTagger(config).eval()


def tokens(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (len(LENGTHS), max(LENGTHS)), generator=g), torch.tensor(LENGTHS)


def test_every_step_is_the_output_layer_of_torch_bilstm_states():
    model = make()
    x, lengths = tokens()
    reference = nn.LSTM(E, H, bidirectional=True, batch_first=True)
    with torch.no_grad():
        for d, suffix in enumerate(["", "_reverse"]):
            for name, p in model.rnn.cells[d].named_parameters():
                getattr(reference, f"{name}_l0{suffix}").copy_(p)
        out = model(x, lengths)
        assert isinstance(out, TaggerOutput)
        for b, n in enumerate(LENGTHS):
            h, _ = reference(model.embedding(x[b : b + 1, :n]))  # (1, n, 2H), the row alone, unpadded
            for t in range(n):
                y_t = model.output.weight @ h[0, t] + model.output.bias  # W_y h_t + b_y
                assert_close(out.logits[b, t], y_t)
    assert torch.equal(out.keep_mask, torch.arange(max(LENGTHS)) < lengths.unsqueeze(1))


@pytest.mark.parametrize("options", [{"cell": "gru", "num_layers": 3, "residual": True}, {"bidirectional": False}])
def test_padding_changes_no_real_step(options):
    model = make(**options)
    x, lengths = tokens()
    with torch.no_grad():
        batch = model(x, lengths).logits
        for b, n in enumerate(LENGTHS):
            alone = model(x[b : b + 1, :n]).logits
            assert_close(batch[b, :n], alone[0])
            padded = x[b : b + 1].clone()
            padded[0, n:] = (padded[0, n:] + 1) % V  # other tokens in the padding: nothing real may move
            assert_close(model(padded, lengths[b : b + 1]).logits[0, :n], alone[0])


def test_config_and_input_errors():
    with pytest.raises(ValueError, match=r"^num_layers \(1\) must be an integer >= 2$"):
        RNNSequenceTaggerConfig(V, K, residual=True)
    with pytest.raises(ValueError, match=r"^num_labels \(1\) must be an integer >= 2$"):
        RNNSequenceTaggerConfig(V, 1)
    with pytest.raises(ValueError, match=r"^x must be \(B, T\) integer ids, got shape \(2, 3, 1\) torch.float64$"):
        make()(torch.zeros(2, 3, 1))
