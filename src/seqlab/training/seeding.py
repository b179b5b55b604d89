"""One call that makes a run repeatable: seed every global random generator, get one for shuffling."""

import numbers
import random

import numpy as np
import torch


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's ``random``, NumPy's global generator and torch (CPU and all CUDA devices).

    With the same seed, code and hardware, initialisation, dropout masks and shuffles repeat bit for bit on
    the CPU. Some GPU kernels stay non-deterministic unless ``torch.use_deterministic_algorithms(True)``.

    The returned generator is separate from torch's global one, so the data order does not change when the
    model draws a different number of random values (adding dropout, say).

    Args:
        seed: an integer in [0, 2**32), the range NumPy accepts.

    Returns:
        A CPU ``torch.Generator`` seeded with ``seed``, for shuffling (``torch.randperm(n, generator=g)``).

    Raises:
        ValueError: if seed is not an integer in [0, 2**32) (the message shows it).
    """
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError(f"seed ({seed!r}) must be an integer in [0, 2**32)")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)
