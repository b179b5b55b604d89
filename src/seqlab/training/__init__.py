"""Training: the trainer loop, objectives and seeding."""

from seqlab.training.objectives import teacher_forcing_loss
from seqlab.training.seeding import seed_everything
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer, TrainResult

__all__ = ["LossOutput", "TrainConfig", "TrainResult", "Trainer", "seed_everything", "teacher_forcing_loss"]
