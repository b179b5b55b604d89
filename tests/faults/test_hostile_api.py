"""The recurrent layers and cells answer bad inputs with seqlab's own TypeError / ValueError, not torch's errors."""

import re

import pytest
import torch

from seqlab.nn import GRU, LSTM, RNN, GRUCell, LSTMCell


@pytest.mark.parametrize("layer", [RNN, GRU, LSTM])
@pytest.mark.parametrize(
    ("dtype", "message"),
    [
        (torch.long, "x must be a floating-point tensor (token ids need an embedding first), got torch.int64"),
        (torch.float16, "x has dtype torch.float16 but the layer's weights are torch.float32; convert one with"),
    ],
)
def test_layers_refuse_integer_and_other_float_inputs(layer, dtype, message):
    with pytest.raises(TypeError, match=f"^{re.escape(message)}"):
        layer(3, 4)(torch.zeros(2, 5, 3, dtype=dtype))


@pytest.mark.parametrize("cell", [GRUCell, LSTMCell])
def test_cells_refuse_integer_inputs(cell):
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        cell(3, 4)(torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("layer", [RNN, GRU, LSTM])
def test_no_time_steps_is_a_value_error(layer):
    with pytest.raises(ValueError, match=r"^x has no time steps \(T = 0, shape \(2, 0, 3\)\)"):
        layer(3, 4)(torch.zeros(2, 0, 3))


@pytest.mark.parametrize("layer", [GRU, LSTM])
def test_lengths_as_a_list_equal_lengths_as_a_tensor(layer):
    torch.manual_seed(0)
    module, x = layer(3, 4), torch.randn(2, 5, 3)
    from_list, from_tensor = module(x, lengths=[5, 2]), module(x, lengths=torch.tensor([5, 2]))
    torch.testing.assert_close(from_list.outputs, from_tensor.outputs, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"lengths must be in \[1, T\] = \[1, 5\], got values from 0 to 5"):
        module(x, lengths=[5, 0])
    with pytest.raises(ValueError, match=r"lengths must be an integer tensor, got dtype torch\.float32"):
        module(x, lengths=[5.0, 2.0])
