"""Training: the trainer engine, its strategies and callbacks, objectives, optimizers, clipping and seeding."""

from seqlab.training.callbacks import Callback, MetricsLog, OnBest, OnCycleEnd, TensorBoardLog
from seqlab.training.checkpoint import load_training_state, save_training_state
from seqlab.training.clipping import clip_grad_norm, clip_grad_value, grad_norm
from seqlab.training.device import move_to_device, native_bf16, resolve_device, resolve_precision
from seqlab.training.objectives import LossOutput, teacher_forcing_loss, token_weighted_loss
from seqlab.training.optim import build_optimizer, parameter_groups
from seqlab.training.records import StepRecord, TrainResult
from seqlab.training.seeding import seed_everything
from seqlab.training.strategies import FullSequence, Strategy
from seqlab.training.tbptt import TruncatedBPTT, detach_state, reset_state
from seqlab.training.train_config import ScheduledSamplingTrainConfig, Seq2SeqTrainConfig, TrainConfig
from seqlab.training.trainer import Trainer

__all__ = [
    "Callback",
    "FullSequence",
    "LossOutput",
    "MetricsLog",
    "OnBest",
    "OnCycleEnd",
    "ScheduledSamplingTrainConfig",
    "Seq2SeqTrainConfig",
    "StepRecord",
    "Strategy",
    "TensorBoardLog",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TruncatedBPTT",
    "build_optimizer",
    "clip_grad_norm",
    "clip_grad_value",
    "detach_state",
    "grad_norm",
    "load_training_state",
    "move_to_device",
    "native_bf16",
    "parameter_groups",
    "reset_state",
    "resolve_device",
    "resolve_precision",
    "save_training_state",
    "seed_everything",
    "teacher_forcing_loss",
    "token_weighted_loss",
]
