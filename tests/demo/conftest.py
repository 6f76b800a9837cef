import pytest
import torch

from sat_ext.demo.model import build_policy
from sat_ext.demo.routing import routers
from sat_ext.demo.spec import Asynchrony, EngineSpec, Evaluation, Recipe, RunSpec
from sat_ext.demo.tasks.addition import AdditionTask

_GROUPS = {"recipe": Recipe, "asynchrony": Asynchrony, "evaluation": Evaluation}
_RENAMED = {"eval_every": ("evaluation", "every"), "eval_size": ("evaluation", "size")}


def flat_spec(**kw) -> RunSpec:
    """A RunSpec from flat keywords (``steps=4, mode="bounded", eval_size=8, engine="vllm", mismatch=...``),
    each routed to its group (:mod:`sat_ext.demo.spec`)."""
    groups = {name: {} for name in _GROUPS}
    engine = {}
    top = {}
    for key, value in kw.items():
        if key in _RENAMED:
            group, field = _RENAMED[key]
            groups[group][field] = value
        elif key in ("engine", "mismatch"):
            engine["kind" if key == "engine" else "mismatch"] = value
        else:
            group = next((g for g, cls in _GROUPS.items() if key in cls.__dataclass_fields__), None)
            (groups[group] if group else top)[key] = value
    return RunSpec(**top, **{g: _GROUPS[g](**v) for g, v in groups.items()}, engine=EngineSpec(**engine))


@pytest.fixture(autouse=True)
def _one_thread():
    """The demo runs one torch thread per worker; keep tests deterministic and light on a shared machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def rewarding_warm_state():
    """A short warm start: a policy that sometimes earns reward, so GRPO's advantages and updates are nonzero
    (shared by the recipe and reproducibility tests; ~30 s)."""
    from sat_ext.demo.spec import WarmStartSpec
    from sat_ext.demo.warm import warm_start

    state, stats = warm_start(WarmStartSpec(seed=0, target=0.1, max_steps=400))
    assert stats["sampled_reward"] > 0.02
    return state


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
