"""FieldTransformer: patches against slicing by hand, shapes, causality in time, the residual head, the space
layer against the encoder layer it reuses, rollout, save/load and the messages for bad input."""

import pytest
import torch

from seqlab.errors import ConfigError
from seqlab.models.field_forecaster import (
    FieldTransformer,
    FieldTransformerConfig,
    patchify,
    rollout_fields,
    unpatchify,
)


def tiny(**overrides) -> FieldTransformer:
    torch.manual_seed(0)
    sizes = dict(height=8, width=12, horizon=3, channels=2, patch_size=4, d_model=8, num_heads=2, d_ff=16)
    return FieldTransformer(FieldTransformerConfig(**(sizes | overrides))).eval()


def test_patches_are_the_p_by_p_blocks_in_row_major_order_and_unpatchify_inverts():
    x = torch.randn(2, 3, 8, 12)  # (B, C, Y, X)
    patches = patchify(x, 4)
    assert patches.shape == (2, 6, 3 * 16)
    for i in range(6):
        row, column = divmod(i, 3)
        block = x[:, :, 4 * row : 4 * row + 4, 4 * column : 4 * column + 4]  # (B, C, p, p)
        torch.testing.assert_close(patches[:, i], block.reshape(2, -1), rtol=0, atol=0)
    torch.testing.assert_close(unpatchify(patches, 4, height=8, width=12), x, rtol=0, atol=0)


def test_the_forecast_is_h_fields_of_the_input_grid():
    model = tiny()
    assert model(torch.randn(2, 5, 2, 8, 12)).shape == (2, 3, 2, 8, 12)
    assert model.encode(torch.randn(2, 5, 2, 8, 12)).shape == (2, 5, 6, 8)


def test_a_token_at_step_t_reads_no_later_step():
    model = tiny(num_layers=2)
    x = torch.randn(2, 6, 2, 8, 12, dtype=torch.float64)
    model = model.double()
    changed = x.clone()
    changed[:, 4:] = torch.randn(2, 2, 2, 8, 12, dtype=torch.float64)  # steps 4 and 5 only
    before, after = model.encode(x), model.encode(changed)
    torch.testing.assert_close(after[:, :4], before[:, :4], rtol=0, atol=1e-12)
    assert (after[:, 4:] - before[:, 4:]).abs().max() > 1e-3
    # so a window's first steps give the same tokens as the shorter window they form
    torch.testing.assert_close(model.encode(x[:, :4]), before[:, :4], rtol=0, atol=1e-12)


def test_every_patch_reads_every_other_patch_of_the_field():
    model = tiny().double()
    x = torch.randn(1, 3, 2, 8, 12, dtype=torch.float64)
    changed = x.clone()
    changed[:, :, :, :4, :4] += 1.0  # patch 0 only
    difference = (model(changed) - model(x)).abs().amax(dim=(0, 1, 2))  # (Y, X)
    assert (patchify(difference[None], 4)[0].amax(dim=-1) > 1e-6).all()  # every patch's forecast moved


def test_a_zero_head_forecasts_persistence_with_residual_and_zero_without():
    for residual in (True, False):
        model = tiny(residual=residual)
        torch.nn.init.zeros_(model.head.weight)
        torch.nn.init.zeros_(model.head.bias)
        x = torch.randn(2, 4, 2, 8, 12)
        expected = x[:, -1:].expand(2, 3, 2, 8, 12) if residual else torch.zeros(2, 3, 2, 8, 12)
        torch.testing.assert_close(model(x), expected, rtol=0, atol=0)


def test_the_space_layer_is_the_encoder_layer_applied_to_each_step_by_itself():
    model = tiny(num_layers=1).double()
    x = torch.randn(2, 3, 2, 8, 12, dtype=torch.float64)
    z = model.patch_embedding(patchify(x, 4)) + model.space_positions.weight  # (B, T, P, D)
    z = z + model.time_positions.table[:3, None].to(z.dtype)
    by_step = torch.stack([model.space_layers[0](z[:, t]).output for t in range(3)], dim=1)
    by_patch = torch.stack([model.time_layers[0](by_step[:, :, i], causal=True).output for i in range(6)], dim=2)
    torch.testing.assert_close(model.encode(x), model.final_norm(by_patch))


def test_rollout_feeds_h_fields_back_at_a_time():
    model = tiny()
    x = torch.randn(2, 4, 2, 8, 12)
    first = model(x)
    second = model(torch.cat([x, first], dim=1)[:, -4:])
    torch.testing.assert_close(rollout_fields(model, x, 5), torch.cat([first, second], dim=1)[:, :5])


def test_save_and_load_give_the_same_forecast(tmp_path):
    model = tiny()
    model.save_pretrained(tmp_path)
    loaded = FieldTransformer.from_pretrained(tmp_path).eval()
    x = torch.randn(1, 2, 2, 8, 12)
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


def test_bad_inputs_and_sizes_are_refused_with_the_numbers():
    model = tiny(context_length=4)
    with pytest.raises(ValueError, match=r"x must be \(B, T, 2, 8, 12\) floating, got shape \(1, 2, 2, 8, 8\)"):
        model(torch.randn(1, 2, 2, 8, 8))
    with pytest.raises(ValueError, match=r"window of 5 steps exceeds context_length \(4\)"):
        model(torch.randn(1, 5, 2, 8, 12))
    with pytest.raises(ConfigError, match=r"width \(10\) must be a multiple of patch_size \(4\)"):
        FieldTransformerConfig(height=8, width=10, horizon=1, patch_size=4)
    with pytest.raises(ConfigError, match=r"d_model \(6\) must be even and divisible by num_heads \(4\)"):
        FieldTransformerConfig(height=8, width=8, horizon=1, d_model=6)
