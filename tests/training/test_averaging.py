import pytest
import torch
from torch.testing import assert_close

from seqlab.errors import CheckpointError
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.training.averaging import average_checkpoints, average_state_dicts


def _model(seed, *, hidden_size=6):
    torch.manual_seed(seed)
    config = RNNSeq2SeqConfig(7, 9, embedding_size=4, hidden_size=hidden_size, encoder_layers=1)
    return RNNSeq2Seq(config)


def test_averaged_checkpoints_of_identical_weights_equal_the_weights(tmp_path):
    model = _model(0)
    for name in ("a", "b", "c"):
        model.save_pretrained(tmp_path / name)
    averaged = average_checkpoints([tmp_path / "a", tmp_path / "b", tmp_path / "c"])
    expected = model.state_dict()
    assert averaged.keys() == expected.keys()
    for key, tensor in expected.items():
        assert torch.equal(averaged[key], tensor), key


def test_the_average_is_the_element_wise_mean(tmp_path):
    models = [_model(seed) for seed in (0, 1, 2)]
    for i, model in enumerate(models):
        model.save_pretrained(tmp_path / str(i))
    averaged = average_checkpoints([tmp_path / str(i) for i in range(3)])
    for key, tensor in averaged.items():
        stacked = torch.stack([m.state_dict()[key].double() for m in models])
        assert_close(tensor, stacked.mean(dim=0).float(), msg=key)
        assert tensor.dtype == torch.float32


def test_integer_tensors_must_be_equal():
    same = {"w": torch.ones(2), "step": torch.tensor(3)}
    averaged = average_state_dicts([same, {"w": torch.zeros(2), "step": torch.tensor(3)}])
    assert_close(averaged["w"], torch.full((2,), 0.5))
    assert torch.equal(averaged["step"], torch.tensor(3))
    with pytest.raises(CheckpointError, match=r"^b: integer tensor step differs from a's; it cannot be averaged$"):
        average_state_dicts([same, {"w": torch.ones(2), "step": torch.tensor(4)}], names=["a", "b"])


def test_mismatched_weights_are_refused_in_one_line():
    with pytest.raises(
        CheckpointError, match=r"^checkpoint 2: w is \(3,\) torch.float32, but \(2,\) torch.float32 in checkpoint 1$"
    ):
        average_state_dicts([{"w": torch.ones(2)}, {"w": torch.ones(3)}])
    with pytest.raises(
        CheckpointError, match=r"^checkpoint 2 and checkpoint 1 differ in parameters: 'v' is in only one of them$"
    ):
        average_state_dicts([{"w": torch.ones(2)}, {"w": torch.ones(2), "v": torch.ones(2)}])
    with pytest.raises(CheckpointError, match=r"^no checkpoints to average$"):
        average_state_dicts([])


def test_another_architecture_is_refused_naming_the_field(tmp_path):
    _model(0).save_pretrained(tmp_path / "a")
    _model(0, hidden_size=8).save_pretrained(tmp_path / "b")
    with pytest.raises(CheckpointError) as caught:
        average_checkpoints([tmp_path / "a", tmp_path / "b"])
    assert (
        str(caught.value)
        == f"{tmp_path / 'b'}: another architecture than {tmp_path / 'a'} (config.hidden_size: 8 vs 6)"
    )


def test_a_directory_without_weights_is_refused(tmp_path):
    _model(0).save_pretrained(tmp_path / "a")
    (tmp_path / "b").mkdir()
    with pytest.raises(CheckpointError, match=r"b: not a model checkpoint \(no config.json\)$"):
        average_checkpoints([tmp_path / "a", tmp_path / "b"])
