import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """The demo runs one torch thread per worker; keep tests deterministic and light on a shared machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
