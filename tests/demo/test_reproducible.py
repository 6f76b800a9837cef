"""A rerun on one machine gives the same numbers: runs, warm starts and the whole command are deterministic."""

import csv
import json

import pytest
import torch

from sat_ext.demo import cli, execute
from sat_ext.demo.engines import Mismatch
from sat_ext.demo.engines.vllm_engine import vllm_available
from sat_ext.demo.isa import ISA_VARIABLES
from sat_ext.demo.losses import default_settings, setting_for
from sat_ext.demo.methods import parse_method
from sat_ext.demo.spec import WarmStartSpec
from sat_ext.demo.train import run
from sat_ext.demo.warm import warm_start

from .conftest import flat_spec


@pytest.fixture(scope="module")
def warm_state(rewarding_warm_state):
    return rewarding_warm_state  # some reward, so the runs learn and could diverge


@pytest.mark.parametrize(
    "engine",
    ["emulated", pytest.param("vllm", marks=pytest.mark.skipif(not vllm_available()[0], reason=vllm_available()[1]))],
)
def test_two_runs_of_the_same_seed_are_identical(warm_state, engine):
    m = parse_method("sat_gspo")
    spec = flat_spec(
        method=m,
        lag=2,
        seed=1,
        setting=setting_for(default_settings(), m),
        backend="verl",
        steps=6,
        prompts_per_step=8,
        group_size=4,
        eval_every=3,
        eval_size=32,
        lr=1e-3,
        engine=engine,
        mismatch=Mismatch("bf16", 0.1 if engine == "emulated" else 0.0),
        warm=WarmStartSpec(seed=0),
    )
    a, b = run(spec, warm_state), run(spec, warm_state)  # vllm: the second reuses the process's pooled engine
    assert any(h["grad_norm"] > 0 for h in a.history)
    assert a.evals == b.evals and a.lag_counts == b.lag_counts
    assert a.history == b.history  # every metric of every step, bit for bit


def test_the_warm_start_does_not_depend_on_the_callers_thread_count():
    spec = WarmStartSpec(seed=0, max_steps=30, check_every=1000)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two, _ = warm_start(spec)
        assert torch.get_num_threads() == 2  # restored
        torch.set_num_threads(1)
        one, _ = warm_start(spec)
    finally:
        torch.set_num_threads(old)
    assert all(torch.equal(two[k], one[k]) for k in one)


def test_the_warm_start_cache_is_keyed_by_the_float_environment(monkeypatch):
    for name in ISA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    spec = WarmStartSpec(seed=0)
    key = execute.warm_key(spec)
    assert key == execute.warm_key(WarmStartSpec(seed=0)) != execute.warm_key(WarmStartSpec(seed=1))
    original = execute.float_environment
    env = original()
    assert env["cpu_capability"] and env["torch"] == torch.__version__ and env["isa_variables"] == "none"
    monkeypatch.setattr(execute, "float_environment", lambda: {**env, "cpu_capability": "OTHER"})
    assert execute.warm_key(spec) != key  # a cache file made on another CPU is not reused
    monkeypatch.setattr(execute, "float_environment", original)
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    assert execute.float_environment()["isa_variables"] == "MKL_ENABLE_INSTRUCTIONS=AVX2"
    assert execute.warm_key(spec) != key  # nor one made under another instruction-set cap


TINY = [
    "--steps",
    "4",
    "--sft-max-steps",
    "400",
    "--sft-target",
    "0.1",
    "--eval-every",
    "2",
    "--eval-size",
    "32",
    "--no-progress",
    "--prompts-per-step",
    "8",
    "--group-size",
    "4",
    "--engine",
    "emulated",
    "--seeds",
    "2",
    "--methods",
    "vanilla,sat",
    "--lags",
    "1,3",
    "--lr",
    "1e-3",
]


def _numbers(path):
    """A CSV's rows without their timing columns."""
    with open(path) as f:
        return [{k: v for k, v in row.items() if k not in ("wall_s", "cpu_s")} for row in csv.DictReader(f)]


def test_the_same_command_twice_gives_the_same_numbers_whatever_jobs_is(tmp_path, warm_state):
    # The module's warm start (one that earns reward, so the runs learn) stands in the cache for both seeds.
    cache = tmp_path / "cache"
    cache.mkdir()
    for seed in (0, 1):
        spec = WarmStartSpec(seed=seed, target=0.1, max_steps=400)
        torch.save(
            {"state": warm_state, "stats": {"sft_steps": 0.0, "sampled_reward": 0.0, "greedy_reward": 0.0}},
            cache / f"warm-{execute.warm_key(spec)}.pt",
        )
    common = [*TINY, "--cache-dir", str(cache)]
    assert cli.main([*common, "--jobs", "1", "--out", str(tmp_path / "a")]) == 0
    assert cli.main([*common, "--jobs", "2", "--out", str(tmp_path / "b")]) == 0
    assert all(w["cached"] for w in json.loads((tmp_path / "b" / "manifest.json").read_text())["warm_starts"])
    for name in ("runs.csv", "results.csv"):
        a, b = _numbers(tmp_path / "a" / name), _numbers(tmp_path / "b" / name)
        assert a and a == b, name
    runs = _numbers(tmp_path / "a" / "runs.csv")
    assert len(runs) == 8 and any(r["start"] != r["final"] for r in runs)  # the runs moved
