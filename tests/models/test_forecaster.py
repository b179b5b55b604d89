"""Forecaster: shapes, the autoregressive head as a one-step model fed back, and rollout past the horizon."""

import pytest
import torch

from seqlab.errors import ConfigError
from seqlab.models.forecaster import Forecaster, ForecasterConfig, rollout


@pytest.mark.parametrize("encoder", ["rnn", "gru", "lstm", "transformer", "tcn"])
@pytest.mark.parametrize("head", ["direct", "autoregressive"])
def test_every_encoder_and_head_forecasts_h_steps_of_c_channels(encoder, head):
    torch.manual_seed(0)
    model = Forecaster(
        ForecasterConfig(
            channels=3,
            horizon=4,
            encoder=encoder,
            head=head,
            hidden_size=8,
            d_model=8,
            num_heads=2,
            d_ff=16,
            num_layers=1,
        )
    ).eval()
    assert model(torch.randn(2, 6, 3)).shape == (2, 4, 3)


def test_the_autoregressive_head_feeds_each_forecast_back_as_the_newest_input():
    torch.manual_seed(0)
    model = Forecaster(ForecasterConfig(channels=2, horizon=3, head="autoregressive", hidden_size=8)).eval()
    x = torch.randn(2, 5, 2)
    window, expected = x, []
    for _ in range(3):  # the one-step forecaster by hand: the head on the window's last output
        step = model.head(model.encoder(window)[0][:, -1]).view(2, 1, 2)
        expected.append(step)
        window = torch.cat([window[:, 1:], step], dim=1)
    torch.testing.assert_close(model(x), torch.cat(expected, dim=1))


def test_rollout_past_the_horizon_forecasts_from_its_own_forecasts():
    torch.manual_seed(0)
    model = Forecaster(ForecasterConfig(channels=1, horizon=2, hidden_size=8)).eval()
    x = torch.randn(3, 4, 1)
    first = model(x)
    second = model(torch.cat([x, first], dim=1)[:, -4:])
    torch.testing.assert_close(rollout(model, x, 3), torch.cat([first, second], dim=1)[:, :3])


def test_bad_configs_and_inputs_are_refused():
    with pytest.raises(ConfigError, match="d_model"):
        ForecasterConfig(channels=1, horizon=1, encoder="transformer", d_model=10, num_heads=4)
    with pytest.raises(ValueError, match=r"\(B, T, 2\)"):
        Forecaster(ForecasterConfig(channels=2, horizon=1))(torch.randn(1, 3, 3))


@pytest.mark.parametrize("head", ["direct", "autoregressive"])
def test_a_residual_forecaster_with_a_zero_head_forecasts_persistence(head):
    model = Forecaster(ForecasterConfig(channels=2, horizon=3, head=head, residual=True, hidden_size=8)).eval()
    torch.nn.init.zeros_(model.head.weight)
    torch.nn.init.zeros_(model.head.bias)
    x = torch.randn(2, 5, 2)
    torch.testing.assert_close(model(x), x[:, -1:].expand(2, 3, 2))


def test_a_tcn_encoder_forecasts_from_its_receptive_field_only():
    torch.manual_seed(0)
    config = ForecasterConfig(channels=2, horizon=3, encoder="tcn", hidden_size=8, num_levels=1, kernel_size=2)
    model = Forecaster(config).double().eval()
    assert model.encoder.receptive_field == 3  # 1 + 2 (k - 1)(2^L - 1)
    x = torch.randn(4, 7, 2, dtype=torch.float64)
    changed = x.clone()
    changed[:, :4] = torch.randn(4, 4, 2, dtype=torch.float64)  # all but the last R = 3 steps
    torch.testing.assert_close(model(changed), model(x))
    changed[:, 4] += 1.0  # the oldest step it reads
    assert not torch.allclose(model(changed), model(x))
    torch.testing.assert_close(model(x), model.head(model.encoder(x).outputs[:, -1]).view(4, 3, 2))


def test_bad_tcn_sizes_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^kernel_size \(0\) must be an integer >= 1$"):
        ForecasterConfig(channels=1, horizon=1, encoder="tcn", kernel_size=0)
    with pytest.raises(ConfigError, match=r"^num_levels \(-2\) must be an integer >= 1$"):
        ForecasterConfig(channels=1, horizon=1, encoder="tcn", num_levels=-2)
