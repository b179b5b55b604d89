"""Data-parallel training on PyTorch's own engine: ``torch.distributed`` process groups,
``DistributedDataParallel`` and the ``torchrun`` launcher (its elastic agent).

How a run is split over W processes (ranks 0 .. W-1, one per CPU process or GPU):

- **Launch**: ``torchrun --nproc_per_node=W -m seqlab train ...``, or ``seqlab train --nproc W ...``, which
  calls the same launcher in-process (``launch``). Each worker finds RANK, WORLD_SIZE, LOCAL_RANK,
  MASTER_ADDR and MASTER_PORT in its environment; ``process_group`` joins the group from them (gloo for
  CPU tensors, NCCL for CUDA tensors on device ``cuda:LOCAL_RANK``) and leaves it at the end, on error too.
- **Data**: every rank reads the same global micro-batches (same seed, same data generator) and keeps its
  share (``shard_batch``: rows r*B/W .. (r+1)*B/W of every tensor, as ``torch.tensor_split``), so a seed
  gives the same global batches as one process would.
- **Gradient**: ``DistributedDataParallel`` averages the ranks' gradients at every backward. Before each
  backward the ranks all-reduce their token counts n_r and loss sums, and rank r backpropagates
  W n_r l_r / c (l_r its mean loss over n_r tokens, c the trainer's common scale; see ``Trainer``): the
  average over ranks is then sum_r n_r grad l_r / c, the single-process gradient of the token mean up to
  floating-point rounding. A rank whose share is empty (a last batch with fewer than W sequences)
  backpropagates the batch's first sequence with weight 0, so that DDP's all-reduce still runs everywhere.
- **Validation** runs on rank 0 only; the others wait for its metrics (``broadcast_object_list``, which
  pickles in memory between the run's own processes; nothing read from a file is unpickled), so every rank
  takes the same best-model and early-stopping decisions. A ``time_budget`` stop is rank 0's clock's decision,
  broadcast the same way, and so is the elapsed time a budgeted schedule sets each step's learning rate from.
- **Files**: only rank 0 logs, shows a progress bar, calls callbacks and writes checkpoints, the run
  directory and results; the other ranks write nothing.
- **Resume**: every rank loads the same training state. All ranks seed their generators alike and the
  checkpoint holds rank 0's random states, which every rank restores: a resumed run equals the
  uninterrupted one exactly when the ranks draw the same random numbers (no dropout, or shares of equal size).
  Dropout masks of the ranks' shares therefore come from the same stream (the same positions get the same
  mask on every rank); a run with dropout is not equal to a single process, only statistically alike.

``TruncatedBPTT`` carries a recurrent state per stream, which would live on one rank each; it is refused.

Source: Li et al. (2020), "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB
13(12), sec. 3 (DDP's gradient all-reduce); the weighting makes the step's gradient the token mean of
``Trainer``'s docstring over the whole global batch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch
from torch.nn.parallel import DistributedDataParallel

from seqlab.errors import ConfigError
from seqlab.logs import quiet_loggers
from seqlab.training.objectives import LossOutput
from seqlab.training.strategies import Strategy
from seqlab.training.tbptt import TruncatedBPTT

__all__ = [
    "DataParallel",
    "Share",
    "data_parallel",
    "is_writer",
    "launch",
    "launched_by_torchrun",
    "process_group",
    "record_error",
    "shard_batch",
]

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"  # where the elastic agent reads a worker's error


def launched_by_torchrun() -> bool:
    """True in a worker that ``torchrun`` (or ``launch``) started: its environment names a rank and a world."""
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def is_writer() -> bool:
    """True in the process that writes files: rank 0 of an active process group, or a process without one."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


@contextlib.contextmanager
def process_group(timeout: timedelta | None = None) -> Iterator[None]:
    """Join the process group described by torchrun's environment for the ``with`` block, then leave it.

    Outside torchrun (no RANK, WORLD_SIZE, ...) it does nothing, so one code path serves both. The backend
    is gloo for CPU tensors and, where CUDA is usable, NCCL for CUDA tensors with this process on device
    ``cuda:LOCAL_RANK``. The group is destroyed when the block ends, by an exception too. ``timeout`` bounds
    the wait for the other ranks at the rendezvous and in each collective (torch's default, 30 minutes for
    gloo and 10 for NCCL, when None); a rank that waits longer raises torch's error.

    Raises:
        ConfigError: the environment's LOCAL_RANK names a GPU this machine does not have.
    """
    if not launched_by_torchrun() or dist.is_initialized():
        yield
        return
    backend = "gloo"
    if torch.cuda.is_available() and dist.is_nccl_available():
        local_rank = int(os.environ["LOCAL_RANK"])
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"LOCAL_RANK {local_rank} has no GPU: this machine has {torch.cuda.device_count()}; "
                "start at most that many processes per node"
            )
        torch.cuda.set_device(local_rank)
        backend = "cpu:gloo,cuda:nccl"
    dist.init_process_group(backend=backend, timeout=timeout)
    try:
        yield
    finally:
        dist.destroy_process_group()


def launch(nproc: int, argv: Sequence[str]) -> int:
    """Run ``python -m seqlab ARGV`` in ``nproc`` worker processes with torchrun's launcher and return the
    exit code: 0, or the first failed worker's.

    This is ``torchrun --standalone --nproc_per_node=NPROC -m seqlab ARGV`` through its Python API
    (``torch.distributed.launcher.elastic_launch``): a rendezvous on a free port of localhost, no restarts,
    and, as torchrun does, ``OMP_NUM_THREADS=1`` for the workers unless it is set. The workers' output goes
    to this process's stdout and stderr. A one-line error is printed by rank 0 only (``record_error``); if
    rank 0 was stopped before it could print, this prints the first failed rank's line instead.

    Raises:
        ConfigError: nproc < 1.
    """
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ConfigError(f"--nproc ({nproc!r}) must be an integer >= 1")
    if "OMP_NUM_THREADS" not in os.environ and nproc > 1:
        os.environ["OMP_NUM_THREADS"] = "1"
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
    )
    try:
        # The failed worker has said what went wrong in one line: no agent lines (exit codes, signals) after it.
        with quiet_loggers(("torch.distributed",), logging.CRITICAL):
            elastic_launch(config, sys.executable)("-m", "seqlab", *argv)
    except ChildFailedError as e:
        failures = [failure for _, failure in sorted(e.failures.items())]
        lines = {failure.local_rank: failure.message for failure in failures if _recorded(failure.error_file)}
        if lines and 0 not in lines:
            print(next(iter(lines.values())), file=sys.stderr)
        return next((failure.exitcode for failure in failures if failure.exitcode > 0), 1)
    return 0


def record_error(line: str) -> None:
    """In a torchrun worker, write the one-line error ``line`` to the agent's error file
    (TORCHELASTIC_ERROR_FILE), where ``launch`` finds it; elsewhere do nothing."""
    path = os.environ.get(ERROR_FILE_VARIABLE)
    if path:
        with open(path, "w", encoding="utf-8") as file:
            json.dump({"message": line, "timestamp": str(int(time.time())), "seqlab": True}, file)


def _recorded(path: str) -> bool:
    """True if ``path`` is an error file that ``record_error`` wrote."""
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file).get("seqlab") is True
    except (OSError, ValueError, AttributeError):
        return False


class Share(NamedTuple):
    """One rank's part of a global micro-batch: ``batch`` (the rows it trains on) and whether its share
    was ``empty`` (then ``batch`` is the first row of the global batch, backpropagated with weight 0)."""

    batch: Any
    empty: bool


def shard_batch(batch: Any, rank: int, world_size: int) -> Share:
    """Rank ``rank``'s rows of ``batch``: every tensor of one or more dimensions (nested in tuples,
    NamedTuples, lists and dicts) is split along dimension 0 (B) into ``world_size`` parts as
    ``torch.tensor_split`` does (the first B mod W parts one row longer); other values are kept.

    Returns: a ``Share``; an empty share holds the first row instead (see ``Share``).
    Raises:
        ValueError: the batch holds no tensor, or tensors that disagree on B (the message shows the sizes).
    """
    sizes = {value.shape[0] for value in _tensors(batch) if value.dim() > 0}
    if len(sizes) != 1:
        raise ValueError(
            f"data-parallel training splits a batch along dimension 0 of its tensors; got sizes {sorted(sizes)}"
        )
    (size,) = sizes
    start = rank * (size // world_size) + min(rank, size % world_size)
    stop = start + size // world_size + (rank < size % world_size)
    empty = start == stop
    return Share(_rows(batch, slice(0, 1) if empty else slice(start, stop)), empty)


def _tensors(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _rows(value: Any, rows: slice) -> Any:
    if isinstance(value, Tensor):
        return value[rows] if value.dim() > 0 else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_rows(item, rows) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_rows(item, rows) for item in value)
    if isinstance(value, dict):
        return {key: _rows(item, rows) for key, item in value.items()}
    return value


class MicroBatchTotals(NamedTuple):
    """The all-reduced view of one micro-batch: ``weight_tokens`` (W n_r, 0 for an empty share: this rank's
    backward weight numerator), ``tokens`` (N, over all ranks) and ``loss_sum`` (sum_r n_r l_r, nats)."""

    weight_tokens: float
    tokens: int
    loss_sum: float


class _StrategyLoss(nn.Module):
    """``strategy.loss(model, batch, loss_fn)`` as a module's forward, so that DDP sees the whole loss
    computation, whichever of the model's methods ``loss_fn`` calls (``forward`` or another, e.g. ELMo's
    ``language_model_loss``)."""

    def __init__(self, model: nn.Module, strategy: Strategy, loss_fn: Callable[..., LossOutput]) -> None:
        super().__init__()
        self.model = model
        self.strategy = strategy
        self.loss_fn = loss_fn

    def forward(self, batch: Any) -> LossOutput:
        return self.strategy.loss(self.model, batch, self.loss_fn)


class DataParallel:
    """The trainer's side of one rank in an active process group (module docstring).

    DDP runs with ``static_graph=True``: the parameters a loss uses are found in the first step and taken to
    be the same ever after, so a model some of whose parameters the loss never uses (a pooler beside a
    masked-LM head) trains too, without searching the autograd graph at every step.

    Attributes:
        module: the ``DistributedDataParallel`` wrapper of ``strategy.loss(model, batch, loss_fn)``: calling
            it with a batch returns the ``LossOutput``, with DDP's gradient all-reduce hooked into backward.
        rank: this process's rank.  world_size: W, the number of processes.
        writer: True on rank 0, the only rank that writes files.
    """

    def __init__(
        self, model: nn.Module, device: torch.device, strategy: Strategy, loss_fn: Callable[..., LossOutput]
    ) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.writer = self.rank == 0
        self.device = device
        device_ids = None
        if device.type == "cuda":
            device_ids = [device.index if device.index is not None else torch.cuda.current_device()]
        loss = _StrategyLoss(model, strategy, loss_fn)
        self.module = DistributedDataParallel(loss, device_ids=device_ids, static_graph=True)

    def shard(self, batch: Any) -> Share:
        """This rank's share of a global micro-batch (``shard_batch``)."""
        return shard_batch(batch, self.rank, self.world_size)

    def combine(self, share: Share, loss: float, num_tokens: int) -> MicroBatchTotals:
        """All-reduce this rank's token count and loss sum (``loss`` nats per token over ``num_tokens``)."""
        tokens, total = (0, 0.0) if share.empty else (num_tokens, loss * num_tokens)
        values = torch.tensor([tokens, total], dtype=torch.float64, device=self._reduce_device())
        dist.all_reduce(values)
        return MicroBatchTotals(float(self.world_size * tokens), int(values[0].item()), values[1].item())

    def rank0_metrics(self, validate: Callable[[], dict[str, float]]) -> dict[str, float]:
        """``validate()`` run on rank 0; every rank returns its result (the others wait for it)."""
        message: list[Any] = [validate() if self.writer else None]
        dist.broadcast_object_list(message, src=0, device=self._reduce_device())
        return message[0]

    def rank0_decides(self, flag: bool) -> bool:
        """Rank 0's ``flag``, on every rank (for decisions taken on a clock, which differs by rank)."""
        return bool(self.rank0_number(float(flag)))

    def rank0_number(self, number: float) -> float:
        """Rank 0's ``number``, on every rank (the elapsed time a budgeted schedule reads, which differs by rank)."""
        value = torch.tensor([number], dtype=torch.float64, device=self._reduce_device())
        dist.broadcast(value, src=0)
        return value.item()

    def _reduce_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")


def data_parallel(
    model: nn.Module, device: torch.device, strategy: Strategy, loss_fn: Callable[..., LossOutput]
) -> DataParallel | None:
    """A ``DataParallel`` for ``model`` (already on ``device``), trained with ``strategy.loss(model, batch,
    loss_fn)``, when a process group is active, else None.

    Raises:
        ConfigError: the strategy is ``TruncatedBPTT``, whose per-stream state cannot be split over ranks.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return None
    if isinstance(strategy, TruncatedBPTT):
        raise ConfigError(
            "data-parallel training supports whole-sequence batches only; truncated BPTT carries a state per "
            "stream (train the RNN language model in one process)"
        )
    return DataParallel(model, device, strategy, loss_fn)
