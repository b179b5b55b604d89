"""Time and peak memory of one call, on CPU or CUDA.

Time on CPU is the process's CPU time (``time.process_time``, all threads summed): on a machine shared with other
processes, wall-clock time also counts the moments the scheduler gave the cores to someone else, CPU time does not.
On CUDA it is wall-clock time after a synchronize.

Peak memory on CUDA is the caching allocator's ``max_memory_allocated`` above what was allocated before the call.
On CPU torch keeps no such counter and ``tracemalloc`` does not see torch's allocations, so ``PeakTensorMemory``
counts them itself: a ``TorchDispatchMode`` (``seqlab.analysis.torch_dispatch``) sees every tensor that an
operator returns, forward and backward, adds the bytes of each new storage when it appears and subtracts them when
the storage is freed (a weakref finalizer on the storage object, which torch keeps unique per storage). The peak is
of the live tensor bytes created during the call: parameters and inputs that existed before are not counted;
scratch buffers a kernel allocates and frees inside itself, without returning them as tensors, are not counted
either (as CUDA's counter would).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from seqlab.analysis.torch_dispatch import TorchDispatchMode, tree_leaves
from seqlab.validation import check_int


class PeakTensorMemory(TorchDispatchMode):
    """Inside ``with PeakTensorMemory() as tracker:``, ``tracker.peak`` is the most bytes of tensor storage created
    inside the block that were alive at once, and ``tracker.current`` those still alive (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: dict[int, int] = {}  # id(storage) -> bytes

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu":
                storage = tensor.untyped_storage()
                key = id(storage)
                if key not in self._live:
                    self._live[key] = storage.nbytes()
                    self.current += storage.nbytes()
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(storage, self._free, key)
        return out


class CallCost(NamedTuple):
    """seconds: the fastest of the timed calls (CPU s on CPU, wall-clock s on CUDA). peak_bytes: peak memory of one
    more call (bytes)."""

    seconds: float
    peak_bytes: int


def measure_call(fn: Callable[[], object], *, device: torch.device, repeats: int) -> CallCost:
    """Run ``fn`` once to warm up, ``repeats`` times timed (the minimum is kept: on a shared machine the other
    runs carry other processes' noise), then once under the memory counter of ``device`` (module docstring).

    Raises: ConfigError if repeats < 1.
    """
    check_int("repeats", repeats)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    fn()
    synchronize()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        synchronize()
        times.append(clock() - start)
    if device.type == "cuda":
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        synchronize()
        peak = torch.cuda.max_memory_allocated(device) - before
    else:
        with PeakTensorMemory() as tracker:
            fn()
        peak = tracker.peak
    return CallCost(min(times), peak)
