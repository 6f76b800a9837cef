"""The call site: verl's Hydra config -> worker ActorConfig -> verl's own ``ppo_loss`` on an engine-shaped batch.

The ActorConfig is composed from verl's packaged ``ppo_trainer`` / ``ppo_megatron_trainer`` with the documented
overrides and converted with ``omega_conf_to_dataclass`` exactly as ``engine_workers.py`` does. The batch goes
through verl's ``DataProto.to_tensordict`` + ``left_right_2_no_padding`` + ``chunk_tensordict``, and the model
output is the engines' flat jagged ``log_probs``. Bad knob values fail when verl builds the config.
"""

from __future__ import annotations

import pytest
import torch
from _verl_helpers import (
    PL,
    actor_config,
    build_actor_config,
    compose,
    compose_uncached,
    leaves,
    make_padded_batch,
    model_log_probs,
    padded_log_prob,
    sat_overrides,
    tag_rows,
    to_verl_td,
)
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.config import FSDPActorConfig, McoreActorConfig
from verl.workers.utils.losses import ppo_loss

from sat_ext.verl.config import SATPolicyLossConfig
from sat_ext.verl.loss import METRIC_NAMES


def test_hydra_compose_builds_sat_config_with_knobs():
    cfg = compose(sat_overrides("sat", quantile=0.8, kernel="power", exponent=3, c_min=0.1))
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "sat"
    actor = build_actor_config(cfg.actor_rollout_ref.actor)
    assert isinstance(actor, FSDPActorConfig)
    pl = actor.policy_loss
    assert type(pl) is SATPolicyLossConfig
    assert (pl.loss_mode, pl.sat_quantile, pl.sat_kernel, pl.sat_exponent, pl.sat_c_min) == (
        "sat",
        0.8,
        "power",
        3,
        0.1,
    )
    assert pl.sat_gate_scope == "micro" and pl.sat_proxy == "old"  # untouched knobs keep SAT's defaults
    assert actor.global_batch_info == {}


def _run_ppo_loss(actor, batch, n_micro, dp_size=1, global_info=True):
    """ppo_loss on each micro-batch as the FSDP engine calls it; returns losses, metrics, the leaves."""
    tag_rows(batch)
    bs = batch.padded["prompts"].shape[0]
    n_tok = int(batch.padded["response_mask"].sum())
    td = to_verl_td(batch, dp_size, n_tok if global_info else None, bs if global_info else None)
    theta, junk = leaves(batch)
    out = []
    for micro in tu.chunk_tensordict(td, n_micro):
        log_probs = model_log_probs(micro, theta, junk)
        assert log_probs.is_nested
        loss, metrics = ppo_loss(actor, {"log_probs": log_probs}, micro)
        out.append((micro, loss, metrics))
    return out, theta, junk


@pytest.mark.parametrize("loss_mode", ["sat", "sat_gspo"])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_ppo_loss_with_sat_on_engine_shaped_batch(loss_mode, agg):
    actor = actor_config(
        loss_mode, extra=(f"actor_rollout_ref.actor.loss_agg_mode={agg}",), quantile=0.8, kernel="power"
    )
    batch = make_padded_batch(bs=8, seed=11, log_ratio_scale=0.5)
    results, theta, junk = _run_ppo_loss(actor, batch, n_micro=2)
    total = sum(loss for _, loss, _ in results)
    total.backward()
    assert torch.isfinite(theta.grad).all() and theta.grad.abs().sum() > 0
    assert torch.count_nonzero(junk.grad) == 0, "prompt / past-the-end log-prob positions must get no gradient"
    mask = batch.padded["response_mask"].bool()
    assert torch.count_nonzero(theta.grad[~mask]) == 0, "padding and masked tokens must get no gradient"
    assert actor.global_batch_info == {
        "dp_size": 1,
        "batch_num_tokens": int(mask.sum()),
        "global_batch_size": 8,
        "loss_scale_factor": None,
    }

    # Reference: the registered loss called directly on what ppo_loss must have seen after unpadding.
    fn = get_policy_loss_fn(loss_mode)
    ref_theta = theta.detach().clone().requires_grad_(True)
    ref_total = 0.0
    for micro, loss, metrics in results:
        rows = micro["row_id"]
        ref_loss, ref_metrics = fn(
            old_log_prob=batch.padded["old_log_probs"][rows],
            log_prob=padded_log_prob(batch, ref_theta, rows),
            advantages=batch.padded["advantages"][rows],
            response_mask=mask[rows],
            loss_agg_mode=agg,
            config=actor,
        )
        assert torch.equal(loss.detach(), ref_loss.detach())
        ref_total = ref_total + ref_loss
        # Metrics: verl Metric objects, every SAT key present; pg_loss is SUM with global batch info.
        assert all(isinstance(v, Metric) for v in metrics.values())
        assert set(METRIC_NAMES) <= set(metrics), set(METRIC_NAMES) - set(metrics)
        assert metrics["actor/pg_loss"].aggregation == AggregationType.SUM
        for k in METRIC_NAMES:
            assert metrics[k].aggregation == AggregationType.MEAN
            assert metrics[k].values == [ref_metrics[k]], k
        assert metrics["actor/sat/active"].values == [1.0]
    ref_total.backward()
    assert torch.equal(theta.grad, ref_theta.grad)


def test_loss_mode_sat_without_target_runs_with_sat_defaults():
    """Only loss_mode=sat (no _target_): verl builds its plain PolicyLossConfig, SAT runs with its defaults."""
    from verl.workers.config import PolicyLossConfig

    actor = actor_config("vanilla", extra=(f"{PL}loss_mode=sat",))
    assert type(actor.policy_loss) is PolicyLossConfig and actor.policy_loss.loss_mode == "sat"
    batch = make_padded_batch(bs=4, seed=3)
    results, theta, _ = _run_ppo_loss(actor, batch, n_micro=1)
    ((_, loss, metrics),) = results
    loss.backward()
    assert metrics["actor/sat/active"].values == [1.0] and torch.isfinite(theta.grad).all()


def test_ppo_loss_without_global_batch_info_is_mean_aggregated():
    actor = actor_config("sat")
    batch = make_padded_batch(bs=4, seed=2)
    results, theta, _ = _run_ppo_loss(actor, batch, n_micro=1, global_info=False)
    ((_, loss, metrics),) = results
    loss.backward()
    assert metrics["actor/pg_loss"].aggregation == AggregationType.MEAN
    assert torch.isfinite(theta.grad).all()


def test_megatron_trainer_config_with_rollout_is_weights():
    """ppo_megatron_trainer composes to McoreActorConfig; SAT runs with rollout IS weights in the batch."""
    actor = actor_config(
        "sat",
        config_name="ppo_megatron_trainer",
        extra=("actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.clip_ratio_c=10"),
        quantile=0.85,
        gate_scope="global",
        global_method="hist",
    )
    assert isinstance(actor, McoreActorConfig)
    assert isinstance(actor.policy_loss, SATPolicyLossConfig) and actor.policy_loss.sat_gate_scope == "global"
    batch = make_padded_batch(bs=4, seed=5, with_rollout_is_weights=True)
    results, theta, _ = _run_ppo_loss(actor, batch, n_micro=2)
    sum(loss for _, loss, _ in results).backward()
    assert torch.isfinite(theta.grad).all()
    for _, _, metrics in results:
        assert set(METRIC_NAMES) <= set(metrics)
    # The weights reach the loss: recompute without them and the value changes.
    batch2 = make_padded_batch(bs=4, seed=5, with_rollout_is_weights=True)
    del batch2.padded["rollout_is_weights"]
    results2, _, _ = _run_ppo_loss(actor, batch2, n_micro=2)
    assert not torch.equal(results[0][1].detach(), results2[0][1].detach())


BAD = [
    ("sat_quantile", "1.5", "1.5"),
    ("sat_kernel", "nope", "'nope'"),
    ("sat_proxy", "rollout", "'rollout'"),
    ("sat_bogus", "3", "3"),  # not a SAT knob at all
]


CASES = [("ppo_trainer", *b) for b in BAD] + [
    ("ppo_megatron_trainer", *b) for b in BAD if b[0] in ("sat_quantile", "sat_bogus")
]


@pytest.mark.parametrize("config_name,key,value,shown", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_bad_knob_fails_at_config_build_naming_key_and_value(config_name, key, value, shown):
    overrides = sat_overrides("sat") + [f"+{PL}{key}={value}"]
    cfg = compose_uncached(overrides, config_name)
    with pytest.raises(Exception) as info:
        build_actor_config(cfg.actor_rollout_ref.actor)
    msg = str(info.value)
    assert f"{PL}{key}" in msg, msg
    assert f"got {shown}" in msg, msg


def test_documented_command_composes():
    """The command in docs/verl.md composes with verl's packaged config and builds a SAT ActorConfig."""
    import pathlib
    import re
    import shlex

    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "verl.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", doc, flags=re.S) if "verl.trainer.main_ppo" in b)
    tokens = shlex.split(block.replace("\\\n", " "), comments=True)
    config_name = next(t.split("=", 1)[1] for t in tokens if t.startswith("--config-name="))
    overrides = [t for t in tokens if "=" in t and not t.startswith("-")]
    assert any("policy_loss._target_=" in t for t in overrides) and len(overrides) >= 8
    cfg = compose_uncached(overrides + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"], config_name)
    actor = build_actor_config(cfg.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, SATPolicyLossConfig) and actor.policy_loss.loss_mode == "sat"
    assert cfg.algorithm.rollout_correction.bypass_mode is True
    assert get_policy_loss_fn(actor.policy_loss.loss_mode).__module__ == "sat_ext.verl.loss"
