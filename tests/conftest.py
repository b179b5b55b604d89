"""Suite-wide settings."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # The suite's tensors are tiny: a second intra-op thread only adds synchronisation, which on a busy
    # 2-core machine made tiny LSTM steps hundreds of times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
