import copy

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from seqlab.errors import CheckpointError
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.training.averaging import AverageLastValidated, average_checkpoints, average_state_dicts
from seqlab.training.callbacks import Callback
from seqlab.training.checkpoint import load_training_state, save_training_state
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer


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


def test_a_checkpoint_holding_nan_is_refused_naming_the_file_and_tensor(tmp_path):
    good, diverged = _model(0), _model(1)
    name = next(iter(diverged.state_dict()))
    with torch.no_grad():
        diverged.state_dict()[name].view(-1)[0] = float("nan")
    good.save_pretrained(tmp_path / "good")
    diverged.save_pretrained(tmp_path / "diverged")
    weights = tmp_path / "diverged" / "model.safetensors"
    with pytest.raises(
        CheckpointError, match=f"^{weights}: {name} holds NaN or infinite values \\(a diverged model\\?\\)$"
    ):
        average_checkpoints([tmp_path / "good", tmp_path / "diverged"])


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


class _Snapshots(Callback):
    """Records the weights at every validation, independently of the callback under test."""

    def __init__(self):
        self.weights = []

    def on_validation_end(self, model, record):
        self.weights.append(copy.deepcopy(model.state_dict()))


def test_average_last_validated_is_the_mean_of_the_last_k_validations():
    torch.manual_seed(0)
    x = torch.randn(32, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
    model = nn.Linear(3, 1)

    def train_batches(epoch, generator, batch_size):
        for start in range(0, 32, batch_size):
            yield x[start : start + batch_size], y[start : start + batch_size]

    averager, snapshots = AverageLastValidated(3), _Snapshots()
    config = TrainConfig(lr=0.05, batch_size=8, max_epochs=5, patience=None, validate_every=2)
    Trainer(
        model,
        config,
        loss_fn=lambda m, b: LossOutput(nn.functional.mse_loss(m(b[0]), b[1]), len(b[0])),
        train_batches=train_batches,
        validate=lambda m: {"valid_loss": nn.functional.mse_loss(m(x), y).item()},
        callbacks=[averager, snapshots],
    ).fit()
    assert len(snapshots.weights) > 3
    averaged = averager.average()
    for key in averaged:
        expected = torch.stack([w[key] for w in snapshots.weights[-3:]]).mean(dim=0)
        assert_close(averaged[key], expected)


def test_average_last_needs_a_validation_and_a_positive_k():
    with pytest.raises(CheckpointError, match=r"^no checkpoints to average$"):
        AverageLastValidated(2).average()
    with pytest.raises(ValueError, match="average_last"):
        AverageLastValidated(0)


def test_average_last_state_round_trips_through_a_training_checkpoint(tmp_path):
    """state_dict -> save_training_state -> load_training_state -> load_state_dict keeps the last k copies."""
    averager = AverageLastValidated(2)
    for seed in range(3):
        averager.on_validation_end(_model(seed), {})
    save_training_state(tmp_path / "state.safetensors", {"averaged": averager.state_dict()})
    restored = AverageLastValidated(2)
    restored.load_state_dict(load_training_state(tmp_path / "state.safetensors")["averaged"])
    expected = average_state_dicts([_model(1).state_dict(), _model(2).state_dict()])
    for key, tensor in restored.average().items():
        assert torch.equal(tensor, expected[key])
    with pytest.raises(CheckpointError, match="missing"):
        restored.load_state_dict({})
