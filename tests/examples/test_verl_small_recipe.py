"""The small recipe (examples/verl_small_qwen3_1p7b) against the installed verl 0.9.1, on CPU.

Each of the 8 variants is composed with Hydra as ``python -m sat_ext.verl.main_ppo --config-path ...
--config-name VARIANT`` does, every key its YAML sets must exist in verl's FSDP schema (or be a free-form dict
checked against its reader), verl's ``validate_config`` passes, the actor/rollout sections convert to verl's
dataclasses, and each variant's key settings equal the row of :data:`EXPECTED`, a table written from the
paper (App. F, Table 9) and the recipe's README, not read from the YAML.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

import verl  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from test_verl_examples import (  # noqa: E402
    IGNORED_PREFIXES,
    _free_form_ok,
    _lookup,
    _raw,
    _set_keys,
    compose_variants,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "verl_small_qwen3_1p7b"
CONFIG_DIR = EXAMPLE / "config"
VERL_CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"
SAT_TARGET = "sat_ext.verl.config.SATPolicyLossConfig"

# Shared by every row (the paper's App. F where it transfers; the recipe's scale-down where it does not).
COMMON = {
    "actor_rollout_ref.model.path": f"{os.environ['HOME']}/models/Qwen3-1.7B-Base",
    "actor_rollout_ref.actor.strategy": "fsdp",
    "actor_rollout_ref.rollout.name": "vllm",
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 4,  # GPUs 0-3 train
    "actor_rollout_ref.rollout.nnodes": 1,
    "actor_rollout_ref.rollout.n_gpus_per_node": 4,  # GPUs 4-7 roll out
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.85,
    "actor_rollout_ref.hybrid_engine": False,
    "actor_rollout_ref.actor.optim.betas": [0.9, 0.98],
    "actor_rollout_ref.actor.optim.lr": 2e-6,
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "constant",
    "actor_rollout_ref.actor.optim.lr_warmup_steps": 0,
    "actor_rollout_ref.actor.optim.weight_decay": 0.0,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_coef": 1e-3,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff": 0,
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.2,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 64,
    "actor_rollout_ref.actor.ppo_epochs": 1,
    "actor_rollout_ref.rollout.n": 16,
    "actor_rollout_ref.rollout.temperature": 1.0,
    "actor_rollout_ref.rollout.top_p": 1.0,
    "actor_rollout_ref.rollout.top_k": -1,
    "data.max_prompt_length": 1024,
    "data.max_response_length": 8192,
    "algorithm.adv_estimator": "grpo",
    "algorithm.use_kl_in_reward": False,
    "algorithm.rollout_correction.bypass_mode": False,  # the paper's checkpoint denominator
    "trainer.v1.trainer_mode": "sat_separate_async",
    "trainer.v1.sampler.sampler_kwargs.mode": "interval",
    "trainer.v1.sampler.sampler_kwargs.prefetch": 1,
    "actor_rollout_ref.rollout.val_kwargs.n": 8,
    # the count is val_kwargs.n whatever the data file; App. F's verifier as the reward
    "data.custom_cls.path": "pkg://sat_ext.examples.verl_dataset",
    "data.custom_cls.name": "ConfigCountDataset",
    "reward.custom_reward_function.path": "pkg://sat_ext.examples.math_reward",
    "reward.custom_reward_function.name": "compute_score",
    "actor_rollout_ref.rollout.val_kwargs.temperature": 1.0,
    "trainer.logger": ["console", "file"],
}
LOSS = {  # loss_mode, aggregation, dual clip (None: the loss has none)
    "grpo": ("vanilla", "token-mean", 3.0),
    "gspo": ("gspo", "seq-mean-token-mean", None),
    "sat_grpo": ("sat", "token-mean", 3.0),
    "sat_gspo": ("sat_gspo", "seq-mean-token-mean", None),
}
LAG = {  # interval, train_batch_size (prompts per global step), global steps, test_freq (global steps)
    1: (1, 64, 200, 16),
    8: (8, 512, 25, 2),
}


def _row(method: str, lag: int) -> dict:
    loss, agg, dual = LOSS[method]
    interval, batch, steps, test_freq = LAG[lag]
    row = dict(COMMON)
    row.update(
        {
            "actor_rollout_ref.actor.policy_loss.loss_mode": loss,
            "actor_rollout_ref.actor.loss_agg_mode": agg,
            "trainer.v1.separate_async.parameter_sync_step": interval,
            "trainer.v1.sampler.sampler_kwargs.interval": interval,
            "data.train_batch_size": batch,
            "trainer.total_training_steps": steps,
            "trainer.test_freq": test_freq,
            "trainer.experiment_name": f"{method}_lag{lag}",
        }
    )
    if dual is not None:
        row["actor_rollout_ref.actor.clip_ratio_c"] = dual
    if method.startswith("sat"):
        row["actor_rollout_ref.actor.policy_loss._target_"] = SAT_TARGET
        row["actor_rollout_ref.actor.policy_loss.sat_quantile"] = 0.9
        row["actor_rollout_ref.actor.policy_loss.sat_kernel"] = "hill"
        row["actor_rollout_ref.actor.policy_loss.sat_exponent"] = 2.0
        row["actor_rollout_ref.actor.policy_loss.sat_gate_scope"] = "micro"
    return row


EXPECTED = {f"{m}_lag{lag}": _row(m, lag) for m in LOSS for lag in LAG}
VARIANTS = sorted(EXPECTED)


@pytest.fixture(scope="module")
def composed() -> dict[str, DictConfig]:
    return compose_variants(CONFIG_DIR, VARIANTS)


@pytest.fixture(scope="module")
def fsdp_schema() -> tuple[dict, dict]:
    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        default = compose("ppo_trainer")
    return (OmegaConf.to_container(default, resolve=False), _raw(VERL_CONFIG_DIR / "_generated_ppo_trainer.yaml"))


def test_the_variants_are_the_table():
    files = sorted(p.stem for p in CONFIG_DIR.glob("*_lag*.yaml"))
    assert files == VARIANTS
    for name in VARIANTS:
        raw = _raw(CONFIG_DIR / f"{name}.yaml")
        method, lag = name.rsplit("_lag", 1)
        assert raw["hydra"]["searchpath"] == ["pkg://verl.trainer.config"]
        assert raw["defaults"] == ["sat_small_base", {"method": method}, {"lag": f"lag{lag}"}, "_self_"]
        assert set(raw) == {"hydra", "defaults", "trainer"} and raw["trainer"] == {"experiment_name": name}
    for group in ("method", "lag"):
        for f in (CONFIG_DIR / group).glob("*.yaml"):
            assert f.read_text().startswith("# @package _global_\n"), f


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.rglob("*.yaml")), ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_every_key_exists_in_verls_fsdp_schema(path, fsdp_schema):
    schema, generated = fsdp_schema
    problems = []
    for key in _set_keys(path):
        if key.startswith(IGNORED_PREFIXES):
            problems.append(f"{key}: verl ignores this section here")
            continue
        in_schema, in_generated = _lookup(schema, key)[0], _lookup(generated, key)[0]
        if in_schema != in_generated:
            problems.append(f"{key}: composed schema {in_schema}, _generated yaml {in_generated}")
        elif not in_schema and not _free_form_ok(key):
            problems.append(f"{key}: not in verl 0.9.1's ppo_trainer schema")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_matches_its_row_and_passes_verls_checks(name, composed):
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import FSDPActorConfig, RolloutConfig

    from sat_ext.verl.config import SATPolicyLossConfig
    from sat_ext.verl.lag.overrides import check_verl_config

    cfg = composed[name]
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    # KL loss needs the reference model (on the training GPUs); GRPO advantages need no critic
    assert need_reference_policy(cfg) and not need_critic(cfg)
    validate_config(cfg, use_reference_policy=True, use_critic=False)
    assert check_verl_config(cfg) == {}
    for key, want in EXPECTED[name].items():
        got = OmegaConf.select(cfg, key)
        got = OmegaConf.to_container(got) if isinstance(got, (DictConfig,)) or OmegaConf.is_list(got) else got
        assert got == want, f"{name}: {key} = {got!r}, the table says {want!r}"

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert isinstance(actor, FSDPActorConfig) and isinstance(rollout, RolloutConfig)
    assert list(actor.optim.betas) == [0.9, 0.98] and actor.optim.lr == 2e-6 and actor.kl_loss_type == "low_var_kl"
    assert callable(get_policy_loss_fn(actor.policy_loss.loss_mode))
    assert isinstance(actor.policy_loss, SATPolicyLossConfig) is name.startswith("sat_")
    # lengths: one full-length sequence fits a micro-batch; the trainer-side max_model_len holds prompt + response
    assert actor.ppo_max_token_len_per_gpu >= cfg.data.max_prompt_length + cfg.data.max_response_length
    # verl's separate_async start-up constraints
    sync = cfg.trainer.v1.separate_async.parameter_sync_step
    assert cfg.data.train_batch_size == sync * actor.ppo_mini_batch_size
    assert cfg.trainer.v1.separate_async.num_warmup_batches * cfg.data.train_batch_size == 64  # one batch ahead
    assert cfg.trainer.total_training_steps * sync == 200 and cfg.trainer.test_freq * sync == 16


@pytest.mark.parametrize("lag", sorted(LAG))
def test_lag_files_are_sat_ext_lags_translation(lag, composed):
    """lag/lagK.yaml == verl_overrides(interval K, prefetch 1, 64 prompts per step, eval every 16), key by key."""
    from sat_ext.lag import LagConfig
    from sat_ext.verl.lag.overrides import verl_overrides

    overrides = verl_overrides(LagConfig(mode="interval", interval=lag, prefetch=1), train_batch_size=64, eval_every=16)
    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        translated = compose("ppo_trainer", overrides=overrides)
    keys = [o.lstrip("+").split("=", 1)[0] for o in overrides]
    assert set(keys) <= set(_set_keys(CONFIG_DIR / "lag" / f"lag{lag}.yaml"))
    for name in (v for v in VARIANTS if v.endswith(f"_lag{lag}")):
        for key in keys:
            assert OmegaConf.select(composed[name], key) == OmegaConf.select(translated, key), (name, key)


def _dry_run(*args: str, **env: str) -> list[str]:
    out = subprocess.run(
        ["bash", str(EXAMPLE / "run.sh"), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SAT_DRY_RUN": "1", "PYTHON": sys.executable, **env},
    )
    return out.stdout.splitlines()


def test_run_sh_command_composes(tmp_path):
    cmd = _dry_run("sat_grpo_lag8", "trainer.logger=[console,file,wandb]", SAT_LOG_DIR=str(tmp_path / "logs"))
    assert cmd[1:7] == [
        "-m",
        "sat_ext.verl.main_ppo",
        "--config-path",
        str(CONFIG_DIR),
        "--config-name",
        "sat_grpo_lag8",
    ]
    assert cmd[7:] == [
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_ROOT={tmp_path / 'logs'}",
        "trainer.logger=[console,file,wandb]",
    ]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose("sat_grpo_lag8", overrides=cmd[7:])
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_ROOT == str(tmp_path / "logs")
    listed = subprocess.run(
        ["bash", str(EXAMPLE / "run.sh"), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listed == VARIANTS
    bad = subprocess.run(["bash", str(EXAMPLE / "run.sh"), "nope_lag1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown variant" in bad.stderr
