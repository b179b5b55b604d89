"""Training curves read back what the trainer's MetricsLog writes."""

import pytest

from seqlab.analysis.curves import TRAINER_KEYS, plot_training_curves, read_metrics
from seqlab.errors import DataError
from seqlab.training import MetricsLog
from seqlab.training.records import RECORD_KEYS, StepRecord


def write_run(directory, steps=6):
    log = MetricsLog(directory / "metrics.jsonl")
    for step in range(1, steps + 1):
        log.on_step_end(None, StepRecord(step, 1, 3.0 / step, 0.1 * step, 2.0 / step, 10, 100.0, 0.1 * step))
        if step % 3 == 0:
            record = {"epoch": 1, "step": step, "train_loss": 3.0 / step, "grad_norm": 1.0, "lr": 0.1 * step}
            log.on_validation_end(
                None, {**record, "tokens_per_s": 100.0, "valid_loss": 2.5 / step, "per": 50.0 / step, "seconds": 1.0}
            )
    return directory


def test_the_trainers_keys_are_the_ones_the_reader_sets_apart():
    assert TRAINER_KEYS == RECORD_KEYS


def test_read_metrics_returns_the_logged_records(tmp_path):
    curves = read_metrics(write_run(tmp_path))
    assert [s[0] for s in curves.steps] == [1, 2, 3, 4, 5, 6]
    assert curves.steps[1] == (2, 1.5, pytest.approx(0.2), 1.0)
    assert curves.validations[1] == (
        6,
        {"train_loss": 0.5, "valid_loss": pytest.approx(2.5 / 6), "per": pytest.approx(50 / 6)},
    )
    plot_training_curves(curves, tmp_path / "curves.png", title="run")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_files_are_named_with_their_line(tmp_path):
    with pytest.raises(DataError, match="no such run directory"):
        read_metrics(tmp_path / "missing")
    with pytest.raises(DataError, match=r"no metrics\.jsonl"):
        read_metrics(tmp_path)
    path = write_run(tmp_path, steps=2) / "metrics.jsonl"
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(DataError, match=r"metrics.jsonl:3: not a seqlab metrics record"):
        read_metrics(tmp_path)
