"""The demo options E1 / E2's pre-registered rules need (benchmarks/preregistered/miniature_e1_e2.md): the
learning-rate warm-up (``--lr-warmup``), the base runs' q (``--log-base-q``), SAT's per-step newly clipped
fraction, the lag-0 control (lag 1 without prefetch) and ``--gzip-history``; each off by default, leaving a run as
it was."""

import copy
import gzip
import json
import warnings

import pytest
import torch

from sat_ext.demo.cli import build_parser
from sat_ext.demo.learner import BASE_Q, Learner, warmup_lr
from sat_ext.demo.model import build_policy, token_log_probs
from sat_ext.demo.plan import build_plan
from sat_ext.demo.producer import Group
from sat_ext.demo.tasks.addition import AdditionTask, response_mask
from sat_ext.demo.train import run

from .test_recipe import _spec  # the recipe tests' small spec: 4 x 4 samples, lr 1e-3, verl

G = 4


@pytest.fixture(scope="module")
def policy():
    return build_policy(seed=0)


@pytest.fixture(scope="module")
def groups(policy):
    """Four groups with rewards that differ inside each group (nonzero advantages) and a denominator 0.1 off
    the policy's log-probs (nonzero ratios)."""
    task = AdditionTask()
    gen = torch.Generator().manual_seed(7)
    probs = task.sample(4, gen)
    prompts = task.prompt_ids(probs).repeat_interleave(G, dim=0)
    responses = torch.randint(0, task.vocab.size, (4 * G, task.response_len), generator=gen)
    with torch.no_grad():
        lp = token_log_probs(policy, prompts, responses, 1.0, None)
    old = lp + 0.1 * torch.randn(lp.shape, generator=gen)
    mask = response_mask(responses, task.vocab.eos)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0] * 4)
    return [
        Group(j, probs[j], prompts[sl], responses[sl], old[sl], old[sl], mask[sl], rewards[sl])
        for j, sl in enumerate(slice(j * G, (j + 1) * G) for j in range(4))
    ]


def _learner(policy, method="vanilla", **kw):
    return Learner(_spec(method, **kw), copy.deepcopy(policy))


def _params(learner):
    return [p.detach().clone() for p in learner.policy.parameters()]


def test_warmup_lr_is_linear_to_the_full_rate():
    assert [warmup_lr(1.0, s, 4) for s in range(1, 7)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert warmup_lr(5e-5, 3, 10) == pytest.approx(1.5e-5)
    assert warmup_lr(5e-5, 1, 0) == 5e-5 and warmup_lr(5e-5, 100, 0) == 5e-5
    with pytest.raises(ValueError):
        warmup_lr(1.0, 0, 10)


def test_warmup_sets_the_optimizers_rate_each_step(policy, groups):
    pytest.importorskip("verl")
    warm, flat = _learner(policy, lr_warmup=4), _learner(policy)
    before = _params(warm)
    lrs = [warm.step(groups)["lr"] for _ in range(6)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    # Adam's first update is lr * g / (|g| + eps): a quarter of the rate moves every weight a quarter as far
    warm1 = _learner(policy, lr_warmup=4)
    warm1.step(groups)
    flat.step(groups)
    moved = [(a - b, c - b) for a, b, c in zip(_params(warm1), before, _params(flat))]
    assert any(full.abs().max() > 0 for _, full in moved)
    for w, full in moved:
        torch.testing.assert_close(4 * w, full, rtol=1e-3, atol=1e-6)  # float32 weights ~1: ulp 1e-7


def test_warmup_zero_is_todays_step(policy, groups):
    pytest.importorskip("verl")
    off, default, one = _learner(policy, lr_warmup=0), _learner(policy), _learner(policy, lr_warmup=1)
    for _ in range(3):
        a, b, c = off.step(groups), default.step(groups), one.step(groups)
        assert "lr" not in a and a == b
        assert c.pop("lr") == 1e-3 and c == a  # setting the full rate each step changes nothing
    for x, y, z in zip(_params(off), _params(default), _params(one)):
        assert torch.equal(x, y) and torch.equal(x, z)


def test_the_spec_refuses_a_bad_warmup():
    with pytest.raises(ValueError, match="lr_warmup"):
        _spec(lr_warmup=-1)
    with pytest.raises(ValueError, match="lr_warmup"):
        _spec(lr_warmup=2.5)


@pytest.mark.parametrize("base,sat", [("vanilla", "sat"), ("gspo", "sat_gspo")])
def test_base_q_is_the_q_sat_takes_on_the_same_batch(policy, groups, base, sat):
    pytest.importorskip("verl")
    probe, plain, twin = (
        _learner(policy, method=base, base_q=True),
        _learner(policy, method=base),
        _learner(policy, method=sat),
    )
    m_probe, m_plain, m_sat = probe.step(groups), plain.step(groups), twin.step(groups)
    assert m_sat["actor/sat/threshold_q"] > 0.01
    assert m_probe[BASE_Q] == m_sat["actor/sat/threshold_q"]  # the same estimator on the same tokens
    assert BASE_Q not in m_plain
    assert {k: v for k, v in m_probe.items() if k != BASE_Q} == m_plain  # the probe changes nothing else
    for x, y in zip(_params(probe), _params(plain)):
        assert torch.equal(x, y)
    assert "actor/sat/newly_clipped_frac" in m_sat
    if base == "gspo":  # GSPO's ratio is the sequence's: not the token quantile abs_log_ratio/p90 reads
        assert m_probe[BASE_Q] != pytest.approx(m_probe["abs_log_ratio/p90"], rel=1e-3)


def test_a_sat_run_logs_newly_clipped_every_step_and_a_base_run_its_q():
    ws = build_policy(seed=0).state_dict()
    sat = run(_spec("sat", backend="core", lag=2, steps=3, denominator="rollout"), ws)
    assert all("actor/sat/newly_clipped_frac" in h for h in sat.history)
    pytest.importorskip("verl")
    base = run(_spec("vanilla", lag=2, steps=3, denominator="rollout", base_q=True), ws)
    assert all(BASE_Q in h for h in base.history)
    # step 1: the same weights and batch in both runs (later steps follow each loss's own update)
    assert base.history[0][BASE_Q] == sat.history[0]["actor/sat/threshold_q"] > 0


def test_lag_zero_control_is_lag_one_without_prefetch():
    res = run(_spec("sat", backend="core", lag=1, prefetch=0, steps=3), build_policy(seed=0).state_dict())
    assert res.lag_counts == {0: 3 * 4}  # every batch generated by the current weights
    assert all(h["abs_log_ratio/max"] == 0.0 for h in res.history)


def test_cli_options_reach_the_specs():
    args = build_parser().parse_args(["--lr-warmup", "10", "--log-base-q", "--lr-mults", "2", "--lags", "8"])
    spec = build_plan(args, "emulated").specs[0]
    assert spec.recipe.lr_warmup == 10 and spec.evaluation.base_q and spec.recipe.lr == pytest.approx(1e-4)
    plain = build_plan(build_parser().parse_args([]), "emulated").specs[0]
    assert plain.recipe.lr_warmup == 0 and not plain.evaluation.base_q
    assert not build_parser().parse_args([]).gzip_history


@pytest.mark.parametrize("gz", [False, True])
def test_gzip_history_option(tmp_path, gz):
    from sat_ext.demo.cli import _args_record
    from sat_ext.demo.execute import SweepRun
    from sat_ext.demo.outputs import write_outputs
    from sat_ext.demo.spec import RunResult

    argv = ["--methods", "sat", "--lags", "1", "--seeds", "1", "--steps", "2", "--backend", "core"]
    args = build_parser().parse_args(argv + (["--gzip-history"] if gz else []))
    plan = build_plan(args, "emulated")
    history = [{"step": 1.0, "loss": 0.5}, {"step": 2.0, "loss": 0.4}]
    res = RunResult(plan.specs[0], history, [(0, 0.3), (1, 0.4), (2, 0.4)], {1: 32}, {"cpu_s": 1.0}, 1.0)
    timing = dict(total_s=1, warm_start_s=0, rl_s=1, jobs=1, threads=1, warm_cpu_s=0, rl_cpu_s=1, load_avg="0")
    warm = [{"sft_steps": 1, "sampled_reward": 0.3, "greedy_reward": 0.3}]
    with warnings.catch_warnings():  # the plots' means over the SAT metrics this fake run lacks
        warnings.simplefilter("ignore", RuntimeWarning)
        write_outputs(tmp_path, plan, SweepRun([res], [], warm, timing), _args_record(args))
    name = "history.jsonl.gz" if gz else "history.jsonl"
    assert (tmp_path / name).exists() and not (tmp_path / ("history.jsonl" if gz else "history.jsonl.gz")).exists()
    with (gzip.open if gz else open)(tmp_path / name, "rt") as f:
        assert json.loads(f.readline())["history"] == history
    assert name in json.loads((tmp_path / "manifest.json").read_text())["files"]
