"""Standalone recurrent layers of ``seqlab.nn`` exported as graphs: onnxruntime gives the layer's outputs and final
states (float32, within 1e-5) on batch and time sizes other than the export's, with padding and a given state."""

import importlib.util

import pytest
import torch

if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnxscript") is None:
    pytest.skip("onnxruntime/onnxscript not installed (pip install -e '.[export]')", allow_module_level=True)

from seqlab.export import export_graph, recurrent_layer_graph
from seqlab.nn import GRU, LSTM, RNN
from seqlab.nn.cells import LSTMState

LAYERS = {
    "rnn_bidirectional_2_layers": lambda: RNN(3, 4, num_layers=2, bidirectional=True),
    "gru_textbook_time_major": lambda: GRU(3, 4, variant="textbook", batch_first=False),
    "lstm_bidirectional_projected": lambda: LSTM(3, 4, bidirectional=True, proj_size=2),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_a_recurrent_layers_graph_matches_the_layer_within_1e5(name, tmp_path):
    import onnxruntime

    torch.manual_seed(0)
    layer = LAYERS[name]().eval()
    entry = export_graph(recurrent_layer_graph(layer), tmp_path)
    session = onnxruntime.InferenceSession(str(tmp_path / entry["file"]), providers=["CPUExecutionProvider"])
    B, T, LC = 3, 7, layer.num_layers * layer.num_directions  # the export traced 2 x 4
    x = torch.randn(B, T, 3) if layer.batch_first else torch.randn(T, B, 3)
    lengths = torch.tensor([7, 2, 5])
    h_0 = torch.randn(LC, B, layer.output_size)
    state = LSTMState(h_0, torch.randn(LC, B, 4)) if isinstance(layer, LSTM) else h_0
    with torch.no_grad():
        outputs, final = layer(x, lengths, state)
    expected = [outputs, *final] if isinstance(layer, LSTM) else [outputs, final]
    feeds = [x, lengths, *state] if isinstance(layer, LSTM) else [x, lengths, h_0]
    assert entry["inputs"] == [i.name for i in session.get_inputs()]
    got = session.run(None, {name: t.numpy() for name, t in zip(entry["inputs"], feeds, strict=True)})
    assert len(got) == len(expected)
    for array, tensor in zip(got, expected, strict=True):
        torch.testing.assert_close(torch.from_numpy(array), tensor, rtol=0.0, atol=1e-5)
