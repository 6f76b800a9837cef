import pytest
import torch

from sat_ext.demo.model import build_policy, routers
from sat_ext.demo.task import AdditionTask


@pytest.fixture(autouse=True)
def _one_thread():
    """The demo runs one torch thread per worker; keep tests deterministic and light on a shared machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def setup():
    """A policy whose routers have a trained scale (far from init, so perturbed routing flips some
    choices), the task, and 32 prompts x 4."""
    torch.manual_seed(0)
    policy = build_policy(seed=0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        for r in routers(policy):
            r.weight.copy_(torch.randn(r.weight.shape, generator=g) * 0.08)
    task = AdditionTask()
    prompts = task.prompt_ids(task.sample(32, torch.Generator().manual_seed(1))).repeat_interleave(4, 0)
    return policy, task, prompts
