"""Training: the trainer loop, objectives, gradient clipping, truncated BPTT and seeding."""

from seqlab.training.clipping import clip_grad_norm, clip_grad_value, grad_norm
from seqlab.training.objectives import teacher_forcing_loss
from seqlab.training.seeding import seed_everything
from seqlab.training.tbptt import TBPTTUpdate, TruncatedBPTT, detach_state, reset_state
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer, TrainResult

__all__ = [
    "LossOutput",
    "TBPTTUpdate",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TruncatedBPTT",
    "clip_grad_norm",
    "clip_grad_value",
    "detach_state",
    "grad_norm",
    "reset_state",
    "seed_everything",
    "teacher_forcing_loss",
]
