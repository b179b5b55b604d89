"""Helpers of the fault tests: tiny recipe setups, a simulated kill, and reading a run's weights."""

import os
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

import seqlab
from seqlab.data.pronunciations import G2PDataConfig
from seqlab.recipes import RECIPES, g2p
from seqlab.recipes.base import run_training
from seqlab.recipes.lm import config as lm_config
from seqlab.recipes.saved_run import load_recipe_config
from seqlab.training.checkpoint import STATE_FILE, load_training_state
from seqlab.training.train_config import ScheduledSamplingTrainConfig
from seqlab.training.trainer import TrainConfig, Trainer


class Killed(BaseException):
    """Raised by the simulated kill; a BaseException, so no ``except Exception`` in seqlab can swallow it."""


TRAIN_SETTINGS = dict(lr=1e-2, batch_size=8, max_steps=14, validate_every=5, checkpoint_every=3, patience=None)


def train_config(**changes) -> TrainConfig:
    """Steps across epochs, validation in mid-epoch, checkpoints between validations, accumulation, dropout's RNG."""
    return TrainConfig(**{**TRAIN_SETTINGS, **changes})


def g2p_config(dictionary: Path, **train_changes) -> g2p.Config:
    data = G2PDataConfig(train_path=str(dictionary), valid_path=str(dictionary), test_path=str(dictionary))
    model = g2p.RNNConfig(hidden_size=16, embedding_size=8, encoder_layers=1, dropout=0.2)
    train = ScheduledSamplingTrainConfig(**{**TRAIN_SETTINGS, **train_changes})
    return g2p.Config(data=data, model=model, train=train, decode=g2p.DecodeConfig(num_beams=1))


def lm_recipe_config(corpus: Path, arch: str, **train_changes) -> lm_config.Config:
    data = lm_config.LMDataConfig(
        train_path=str(corpus), bptt_len=8, batches_per_epoch=4, valid_tokens=128, valid_fraction=0.1
    )
    models = {
        "gpt": lm_config.GPTModelConfig(num_layers=1, d_model=16, num_heads=2, context_length=16, dropout=0.2),
        "lstm": lm_config.LSTMModelConfig(hidden_size=16, embedding_size=16, rnn_layers=1, dropout=0.2),
    }
    model = models[arch]
    return lm_config.Config(data=data, model=model, train=train_config(**train_changes))


RECIPE_MODULES = RECIPES


def train(recipe: str, config, out: Path, *, mode: str = "new"):
    return run_training(RECIPE_MODULES[recipe], config, out, progress=False, log=lambda line: None, mode=mode)


def kill_at_micro_batch(monkeypatch, count: int) -> None:
    """Make the trainer die (``Killed``) when it starts its ``count``-th micro-batch, as SIGKILL would mid-step."""
    original = Trainer._accumulate
    seen = [0]

    def accumulate(self, batch, step, run):
        seen[0] += 1
        if seen[0] == count:
            raise Killed(f"killed at micro-batch {count}")
        return original(self, batch, step, run)

    monkeypatch.setattr(Trainer, "_accumulate", accumulate)


def resume(recipe: str, out: Path):
    """What ``seqlab train --resume OUT`` does: the saved config, mode "resume"."""
    return train(recipe, load_recipe_config(out, RECIPE_MODULES[recipe].Config), out, mode="resume")


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "model.safetensors")


def final_state(out: Path) -> dict[str, torch.Tensor]:
    """The last training checkpoint's current parameters (not the best ones)."""
    return load_training_state(out / STATE_FILE)["model"]


def assert_equal_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    unequal = [name for name in a if not torch.equal(a[name], b[name])]
    assert not unequal, unequal


TINY_G2P = [
    "model.hidden_size=16",
    "model.embedding_size=8",
    "model.encoder_layers=1",
    "model.dropout=0.2",
    "train.lr=1e-2",
    "train.batch_size=8",
    "train.patience=none",
    "decode.num_beams=1",
]


def g2p_args(dictionary: Path, *settings: str) -> list[str]:
    """``--set`` arguments of a tiny g2p run on ``dictionary`` (train, valid and test alike); ``settings`` replace
    the tiny run's values of the same keys (``--set`` refuses a key given twice)."""
    files = [f"data.{split}_path={dictionary}" for split in ("train", "valid", "test")]
    merged = {item.split("=", 1)[0]: item for item in (*TINY_G2P, *settings)}
    return ["--set", *files, *merged.values()]


def seqlab_command(*argv: object) -> list[str]:
    """``python -m seqlab ARGV`` for a subprocess, running this checkout's seqlab on one thread."""
    return [sys.executable, "-m", "seqlab", *map(str, argv)]


def subprocess_env() -> dict[str, str]:
    source = str(Path(seqlab.__file__).parents[1])
    return {**os.environ, "PYTHONPATH": source, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
