"""The verl preflight's plan on every shipped variant: what changes, what never does, and that verl takes it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")
from omegaconf import OmegaConf  # noqa: E402

from sat_ext.example_configs import variants  # noqa: E402
from sat_ext.preflight import verl_plan  # noqa: E402
from sat_ext.preflight.substitution import NOT_RUN, raw  # noqa: E402
from sat_ext.preflight.verl_plan import ALGORITHM, R3, Context, plan, scale_factor  # noqa: E402
from sat_ext.preflight.verl_target import PreflightError, compose, resolve  # noqa: E402
from sat_ext.verl.lag.overrides import VerlSchedule, verl_warmup_prompts  # noqa: E402

BIG, SMALL = "verl_aime_qwen3_30b", "verl_small_qwen3_1p7b"
TARGETS = [f"{BIG}/{v}" for v in variants(BIG)] + [f"{SMALL}/{v}" for v in variants(SMALL)]
PROMPT_TOKENS = 38  # the shipped sample's longest prompt in the tiny model's tokens
HERE = Path("/preflight")


def _ctx(**kw) -> Context:
    return Context(
        **{
            "device": "cpu",
            "model": HERE / "model",
            "model_why": "tiny",
            "data": (HERE / "t", HERE / "v"),
            "out": HERE,
            "steps": None,
            "prompt_tokens": PROMPT_TOKENS,
            **kw,
        }
    )


@pytest.fixture(scope="module")
def composed() -> dict:
    return {t: compose(resolve(t)[0], []) for t in TARGETS}


@pytest.mark.parametrize("target", TARGETS)
def test_every_variant_plans_and_keeps_the_algorithm(target, composed):
    config = composed[target]
    planned = plan(config, _ctx())
    for key in ALGORITHM:
        if key not in {u.key for u in planned.unchecked}:
            assert raw(planned.run, key) == raw(config, key), key
    old, new = VerlSchedule.of(config), VerlSchedule.of(planned.run)
    assert (old.parameter_sync_step, old.trainer_mode) == (new.parameter_sync_step, new.trainer_mode)
    ahead = [
        verl_warmup_prompts(float(s.num_warmup_batches), s.train_batch_size) / s.ppo_mini_batch_size for s in (old, new)
    ]
    assert ahead[0] == ahead[1] == 1  # one batch ahead, as the examples set it
    assert planned.factor == (32 if target.startswith(BIG) else 16)
    assert planned.steps == 3  # interval mode: past the first window, twice
    rows = {r.key: r for r in planned.rows}
    assert rows["actor_rollout_ref.model.path"].run == str(HERE / "model")
    assert raw(planned.run, "data.max_prompt_length") * planned.factor == raw(config, "data.max_prompt_length")
    assert {u.key for u in planned.unchecked} == (set(R3) if "_r3_" in target else set())


@pytest.mark.parametrize("target", [f"{BIG}/sat_gspo_r3_lag8", f"{BIG}/grpo_tis_lag1", f"{SMALL}/sat_gspo_lag8"])
def test_the_run_config_builds_verls_own_config_objects(target, composed):
    """The run's config passes verl's own validation and dataclass construction, as main_ppo does."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    run = plan(composed[target], _ctx()).run
    validate_config(config=run, use_reference_policy=need_reference_policy(run), use_critic=need_critic(run))
    actor = omega_conf_to_dataclass(run.actor_rollout_ref.actor)
    assert actor.strategy == "fsdp2" and actor.optim.optimizer == "AdamW" and tuple(actor.optim.betas) == (0.9, 0.98)
    assert actor.policy_loss.loss_mode == OmegaConf.select(
        composed[target], "actor_rollout_ref.actor.policy_loss.loss_mode"
    )


def test_every_megatron_setting_of_the_30b_example_is_mapped_or_listed(composed):
    config = composed[f"{BIG}/sat_gspo_r3_lag8"]
    rows = {r.key: r for r in plan(config, _ctx()).rows}
    actor = "actor_rollout_ref.actor"
    for key in (
        "tensor_model_parallel_size",
        "expert_model_parallel_size",
        "sequence_parallel",
        "dtype",
        "use_mbridge",
    ):
        assert rows[f"{actor}.megatron.{key}"].run == NOT_RUN
    assert rows[f"{actor}.optim.lr_decay_style -> optim.lr_scheduler_type"].run == "constant"
    assert rows[f"{actor}.optim.optimizer"].run == "AdamW"
    assert rows[f"{actor}.optim.override_optimizer_config.adam_beta2"].run == NOT_RUN  # carried by optim.betas
    assert rows["actor_rollout_ref.model.use_fused_kernels"].run is False
    assert rows["actor_rollout_ref.rollout.name"].run == "vllm"


def test_the_guard_refuses_a_changed_algorithm_key(composed):
    config = composed[f"{SMALL}/sat_gspo_lag8"]
    run = plan(config, _ctx()).run
    OmegaConf.update(run, "actor_rollout_ref.actor.clip_ratio_high", 0.28)
    with pytest.raises(RuntimeError, match="algorithm key actor_rollout_ref.actor.clip_ratio_high"):
        verl_plan._guard(config, run, [])


def test_the_factor_is_the_largest_that_fits_and_a_prompt_that_cannot_fit_is_named(composed):
    config = composed[f"{BIG}/sat_grpo_lag1"]
    assert scale_factor(config, 38, None) == 32 and scale_factor(config, 20, None) == 64
    assert scale_factor(config, 38, 8) == 8
    with pytest.raises(PreflightError, match="--scale 64: data.max_prompt_length 2048 / 64"):
        scale_factor(config, 38, 64)
    with pytest.raises(PreflightError, match="data.max_prompt_length=2048 is under the data's longest prompt"):
        scale_factor(config, 4000, None)


def test_a_prefetch_that_needs_the_nudged_float_keeps_it_after_scaling(composed):
    """interval 11, prefetch 3: p/n times n*B rounds under p*B for some B (the lag fix); the scaled run keeps
    verl's count at p batches."""
    from sat_ext.verl.lag.overrides import verl_overrides

    overrides = verl_overrides({"mode": "interval", "interval": 11, "prefetch": 3}, 320)
    config = compose(resolve(f"{SMALL}/sat_grpo_lag1")[0], ["+" + o if o.startswith("+") else o for o in overrides])
    planned = plan(config, _ctx())
    s = VerlSchedule.of(planned.run)
    assert (s.parameter_sync_step, s.ppo_mini_batch_size) == (11, 320 // planned.factor)
    assert verl_warmup_prompts(float(s.num_warmup_batches), s.train_batch_size) == 3 * s.ppo_mini_batch_size


def test_on_a_gpu_only_the_model_and_the_runs_own_keys_change(composed):
    """--device cuda (not run here: no GPU): Megatron, SGLang, the lengths and R3 stay as the config has them."""
    from sat_ext.tiny_model import shape_for

    config = composed[f"{BIG}/sat_gspo_r3_lag8"]
    planned = plan(config, _ctx(device="cuda"))
    changed = {r.key for r in planned.rows}
    assert changed <= {
        "actor_rollout_ref.model.path",
        "trainer.total_training_steps",
        "trainer.save_freq",
        "trainer.default_local_dir",
        "trainer.logger",
        "trainer.rollout_data_dir",
        "data.train_files",
        "data.val_files",
    }
    assert (
        planned.factor == 1
        and planned.unchecked == []
        and raw(planned.run, "actor_rollout_ref.actor.strategy") == "megatron"
    )
    shape = shape_for(4, 4)  # the 30B example's TP 4 / EP 4: the tiny model must divide by them
    assert shape.heads % 4 == shape.kv_heads % 4 == shape.experts % 4 == 0


def test_a_users_hydra_config_and_a_composed_one_compose_as_main_ppo_would(tmp_path, composed):
    """A user's config that builds on verl's ppo_trainer (its own defaults list and search path), and verl's
    --cfg job output of a shipped variant: both targets compose, the second to the variant's own config."""
    mine = tmp_path / "my_run.yaml"
    mine.write_text(
        "hydra:\n  searchpath: [pkg://verl.trainer.config]\ndefaults:\n  - ppo_trainer\n  - _self_\n"
        "actor_rollout_ref:\n  actor:\n    policy_loss:\n      loss_mode: gspo\n"
    )
    [target] = resolve(str(mine))
    assert (target.kind, target.name) == ("hydra", "my_run")
    config = compose(target, ["data.train_batch_size=64"])
    assert config.actor_rollout_ref.actor.policy_loss.loss_mode == "gspo" and config.data.train_batch_size == 64
    variant = f"{SMALL}/sat_gspo_lag8"
    job = tmp_path / "job.yaml"
    job.write_text(OmegaConf.to_yaml(composed[variant]))
    [target] = resolve(str(job))
    assert target.kind == "composed"
    assert OmegaConf.to_container(compose(target, []), resolve=False) == OmegaConf.to_container(
        composed[variant], resolve=False
    )
    with pytest.raises(PreflightError, match="Could not override 'data.nope'"):
        compose(target, ["data.nope=1"])
