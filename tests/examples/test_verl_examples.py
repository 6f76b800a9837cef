"""The verl example (examples/verl_aime_qwen3_30b) against the installed verl 0.9.1, on CPU.

Every variant is composed with Hydra exactly as ``python -m verl.trainer.main_ppo --config-path ...
--config-name VARIANT`` does (the example's own config dir plus the ``pkg://verl.trainer.config`` search path),
then checked the way verl itself consumes it:

* every key the example's YAML files set exists in verl's own schema (the composed default
  ``ppo_megatron_trainer``, and the shipped ``_generated_ppo_megatron_trainer.yaml``), except a short list of
  free-form dicts whose keys are checked against what reads them; no key lands in a section verl ignores
  in this setup (``reward_model.*``, ``custom_reward_function.*``, ``critic.*``, ``ref.*``, ...);
* verl's driver check ``validate_config`` passes, and the actor and rollout sections convert with
  ``omega_conf_to_dataclass`` (as the driver and each worker do) to dataclasses that carry every value set;
* ``loss_mode`` resolves in verl's policy-loss registry, and for the SAT variants the policy-loss config is
  ``SATPolicyLossConfig`` with the knobs the YAML sets, turned into the intended ``SATConfig``;
* the paper's setting: 256 prompts x 16 samples per optimizer step, 544 optimizer steps, temperature 0.95,
  top-p 1.0, 32k responses, AIME avg@8, bypass mode with rollout log-probs, R3 where the name says so, and
  the V1 separate_async constraints verl asserts at start-up.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

import verl  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "verl_aime_qwen3_30b"
CONFIG_DIR = EXAMPLE / "config"
VERL_CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"
GROUPS = ("method", "routing", "lag")
VARIANTS = sorted(p.stem for p in CONFIG_DIR.glob("*_lag*.yaml"))
SAT_TARGET = "sat_ext.verl.config.SATPolicyLossConfig"

# Sections verl does not read in this setup: legacy top-level reward keys (main_ppo ignores them; only the
# fully_async entry point migrates them), the critic (GRPO advantages: no critic) and the reference model
# (no KL loss / KL reward: no ref). Setting a key here would have no effect, so the example must not.
IGNORED_PREFIXES = ("reward_model.", "custom_reward_function.", "sandbox_fusion.", "critic.",
                    "actor_rollout_ref.ref.", "distillation.")

# Megatron TransformerConfig fields the example passes through actor.megatron.override_transformer_config
# that verl's schema does not list (it lists recompute_* and attention_backend). Checked against
# megatron.core when it is installed (a GPU machine); named here otherwise.
TRANSFORMER_CONFIG_EXTRA = {"moe_router_dtype"}


def _flatten(node, prefix=()):
    """Leaf paths of a plain container; an empty dict counts as a leaf (a free-form slot)."""
    if isinstance(node, dict):
        if not node:
            return {prefix: node}
        out = {}
        for k, v in node.items():
            out.update(_flatten(v, prefix + (str(k),)))
        return out
    return {prefix: node}


def _raw(path: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def _set_keys(path: Path) -> dict[str, object]:
    """Dotted keys (-> raw values) that one of the example's YAML files sets, without defaults / hydra."""
    raw = _raw(path)
    raw.pop("defaults", None)
    raw.pop("hydra", None)
    return {".".join(k): v for k, v in _flatten(raw).items()}


def _all_example_files() -> list[Path]:
    return sorted(CONFIG_DIR.rglob("*.yaml"))


@pytest.fixture(scope="module")
def schema() -> dict:
    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        default = compose("ppo_megatron_trainer")
    return OmegaConf.to_container(default, resolve=False)


@pytest.fixture(scope="module")
def generated_schema() -> dict:
    return _raw(VERL_CONFIG_DIR / "_generated_ppo_megatron_trainer.yaml")


@pytest.fixture(scope="module")
def composed() -> dict[str, DictConfig]:
    out = {}
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        for name in VARIANTS:
            out[name] = compose(name)
    return out


def _lookup(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _dapo_reward_kwargs() -> set[str]:
    """reward.reward_kwargs keys that verl's dapo reward manager reads (from its source)."""
    src = (Path(verl.__file__).parent / "experimental/reward_loop/reward_manager/dapo.py").read_text()
    top = set(re.findall(r'get\("reward_kwargs", \{\}\)\.get\("(\w+)"', src))
    sub = set(re.findall(r"overlong_buffer_cfg\.(\w+)", src))
    assert {"overlong_buffer_cfg", "max_resp_len"} <= top and {"enable", "len", "penalty_factor", "log"} <= sub
    return {"max_resp_len"} | {f"overlong_buffer_cfg.{s}" for s in sub}


def _transformer_config_fields() -> set[str] | None:
    try:
        from dataclasses import fields

        from megatron.core.transformer import TransformerConfig
    except ImportError:
        return None
    return {f.name for f in fields(TransformerConfig)}


def _sat_fields() -> set[str]:
    from dataclasses import fields

    from sat_ext.verl.config import SATPolicyLossConfig

    return {f.name for f in fields(SATPolicyLossConfig)}


def _free_form_ok(key: str) -> bool:
    """A key under one of the free-form dicts the example uses, checked against what reads it."""
    if key.startswith("reward.reward_kwargs."):
        return key[len("reward.reward_kwargs."):] in _dapo_reward_kwargs()
    prefix = "actor_rollout_ref.actor.megatron.override_transformer_config."
    if key.startswith(prefix):
        name = key[len(prefix):]
        megatron_fields = _transformer_config_fields()
        return name in (megatron_fields if megatron_fields is not None else TRANSFORMER_CONFIG_EXTRA)
    prefix = "actor_rollout_ref.actor.policy_loss."
    if key.startswith(prefix):
        return key[len(prefix):] in _sat_fields()
    prefix = "trainer.v1.sampler.sampler_kwargs."
    if key.startswith(prefix):  # handed to the custom sampler, sat_ext's SATLagReplayBuffer
        from dataclasses import fields

        from sat_ext.lag import LagConfig

        return key[len(prefix):] in {f.name for f in fields(LagConfig)}
    # Ray's runtime_env accepts env_vars; main_ppo merges it into its default runtime env.
    return key.startswith("ray_kwargs.ray_init.runtime_env.env_vars.")


# ------------------------------------------------------------------------------------------------ the files


def test_every_variant_is_listed_and_named_after_its_parts():
    expected = {f"{m}{'_r3' if r == 'r3' else ''}_lag{lag}"
                for m, r in [("grpo", "none"), ("gspo", "none"), ("gspo", "r3"), ("dppo_tv", "none"),
                             ("sat_gspo", "none"), ("sat_grpo", "r3"), ("sat_gspo", "r3")]
                for lag in (1, 8)}
    assert set(VARIANTS) == expected
    for name in VARIANTS:
        raw = _raw(CONFIG_DIR / f"{name}.yaml")
        assert raw["hydra"]["searchpath"] == ["pkg://verl.trainer.config"]
        choices = {k: v for d in raw["defaults"] if isinstance(d, dict) for k, v in d.items()}
        method, lag = re.fullmatch(r"(.+?)(?:_r3)?_lag(\d+)", name).groups()
        assert choices == {"method": method, "routing": "r3" if "_r3_" in name else "none", "lag": f"lag{lag}"}
        assert raw["defaults"][0] == "sat_aime_base" and raw["defaults"][-1] == "_self_"
        assert raw["trainer"]["experiment_name"] == name


def test_group_files_are_global_packages():
    # Without the header Hydra would nest a group file's keys under `method:` / `routing:` / `lag:`.
    for group in GROUPS:
        for f in (CONFIG_DIR / group).glob("*.yaml"):
            assert f.read_text().startswith("# @package _global_\n"), f


def test_no_name_clashes_with_verl_config_groups():
    for group in GROUPS:
        assert not (VERL_CONFIG_DIR / group).exists()
    assert not (VERL_CONFIG_DIR / "sat_aime_base.yaml").exists()


@pytest.mark.parametrize("path", _all_example_files(), ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_every_key_exists_in_verl_schema(path, schema, generated_schema):
    problems = []
    for key in _set_keys(path):
        if key.startswith(IGNORED_PREFIXES):
            problems.append(f"{key}: verl ignores this section in this setup")
            continue
        in_schema, _ = _lookup(schema, key)
        in_generated, _ = _lookup(generated_schema, key)
        if in_schema != in_generated:
            problems.append(f"{key}: in the composed schema={in_schema}, in _generated yaml={in_generated}")
        elif not in_schema and not _free_form_ok(key):
            problems.append(f"{key}: not in verl 0.9.1's schema")
    assert not problems, "\n".join(problems)


def test_reward_keys_are_the_09_ones(composed):
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

    for cfg in composed.values():
        assert cfg.reward.reward_manager.name == "dapo" and "dapo" in REWARD_MANAGER
        assert cfg.reward_model.reward_manager is None  # the silently ignored legacy key stays unset
        assert cfg.reward.reward_kwargs.max_resp_len == cfg.data.max_response_length


# ------------------------------------------------------------------------------------------- as verl reads it


def _example_keys_for(name: str) -> dict[str, object]:
    raw = _raw(CONFIG_DIR / f"{name}.yaml")
    files = [CONFIG_DIR / "sat_aime_base.yaml"]
    files += [CONFIG_DIR / g / f"{v}.yaml" for d in raw["defaults"] if isinstance(d, dict) for g, v in d.items()]
    files.append(CONFIG_DIR / f"{name}.yaml")
    keys: dict[str, object] = {}
    for f in files:
        keys.update(_set_keys(f))
    return keys


def _attr(obj, dotted: str):
    for part in dotted.split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_converts_like_verl(name, composed):
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import McoreActorConfig, RolloutConfig

    cfg = composed[name]
    resolved = OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    assert not need_reference_policy(cfg) and not need_critic(cfg)  # so ref.* / critic.* are really unused
    validate_config(cfg, use_reference_policy=False, use_critic=False)

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    assert isinstance(actor, McoreActorConfig) and isinstance(rollout, RolloutConfig)

    # Every value the example sets reaches the dataclass verl builds from it.
    sections = {"actor_rollout_ref.actor.": actor, "actor_rollout_ref.rollout.": rollout, "algorithm.": algo}
    for key, raw_value in _example_keys_for(name).items():
        expected = _lookup(resolved, key)[1]
        for prefix, obj in sections.items():
            if key.startswith(prefix):
                got = _attr(obj, key[len(prefix):])
                if key.endswith("._target_"):
                    continue
                got = list(got) if isinstance(got, (list, tuple)) else got
                assert got == expected, f"{key}: dataclass has {got!r}, config {expected!r}"

    loss_mode = actor.policy_loss.loss_mode
    assert callable(get_policy_loss_fn(loss_mode))
    assert loss_mode == {"grpo": "vanilla", "gspo": "gspo", "dppo_tv": "dppo_tv", "sat_grpo": "sat",
                         "sat_gspo": "sat_gspo"}[re.match(r"(.+?)(?:_r3)?_lag", name).group(1)]


@pytest.mark.parametrize("name", [v for v in VARIANTS if v.startswith("sat_")])
def test_sat_variants_get_sats_intended_config(name, composed):
    from sat_ext.core import SATConfig
    from sat_ext.verl.config import SATPolicyLossConfig, sat_config_for
    from sat_ext.verl.config import compute_policy_loss_sat, compute_policy_loss_sat_gspo
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass

    actor = omega_conf_to_dataclass(composed[name].actor_rollout_ref.actor)
    pl = actor.policy_loss
    assert isinstance(pl, SATPolicyLossConfig)
    loss = pl.loss_mode
    assert get_policy_loss_fn(loss) is {"sat": compute_policy_loss_sat, "sat_gspo": compute_policy_loss_sat_gspo}[loss]

    method = _raw(CONFIG_DIR / "method" / f"{'sat_gspo' if loss == 'sat_gspo' else 'sat_grpo'}.yaml")
    a = method["actor_rollout_ref"]["actor"]
    knobs = {k[4:]: v for k, v in a["policy_loss"].items() if k.startswith("sat_")}
    all_knobs = {f[4:] for f in _sat_fields() if f.startswith("sat_")}
    # Every knob is spelled out (gspo_gate_level only where it applies).
    assert set(knobs) == (all_knobs if loss == "sat_gspo" else all_knobs - {"gspo_gate_level"})
    expected = SATConfig(eps_low=a["clip_ratio_low"], eps_high=a["clip_ratio_high"],
                         dual_clip=a["clip_ratio_c"] if loss == "sat" else None, **knobs)
    assert sat_config_for(actor, loss) == expected
    if loss == "sat":
        assert (expected.eps_low, expected.eps_high, expected.dual_clip) == (0.2, 0.2, 3.0)
        assert actor.loss_agg_mode == "token-mean"
    else:
        assert (expected.eps_low, expected.eps_high) == (0.2, 0.2)  # the paper's, GSPO included (Table 9)
        assert actor.loss_agg_mode == "seq-mean-token-mean"
    # the knobs spelled out are SAT's defaults, which are the paper's
    assert expected == SATConfig(eps_low=0.2, eps_high=0.2, dual_clip=expected.dual_clip)


@pytest.mark.parametrize("name", VARIANTS)
def test_paper_setting(name, composed):
    cfg = composed[name]
    aa, ro, tr = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.trainer
    lag = int(name.rsplit("lag", 1)[1])
    v1 = tr.v1
    sync = v1.separate_async.parameter_sync_step

    # Paper batch: 256 prompts x 16 samples per optimizer step, one epoch over it, 544 optimizer steps.
    assert aa.ppo_mini_batch_size == 256 and aa.ppo_epochs == 1 and ro.n == 16
    assert tr.total_training_steps * sync == 544
    # Sampling and length.
    assert (ro.temperature, ro.top_p, ro.top_k) == (0.95, 1.0, -1)
    assert cfg.data.max_response_length == 32768
    assert aa.ppo_max_token_len_per_gpu >= cfg.data.max_prompt_length + cfg.data.max_response_length
    # AIME24 avg@8.
    vk = ro.val_kwargs
    assert (vk.n, vk.do_sample, vk.temperature, vk.top_p) == (8, True, 0.95, 1.0)
    assert tr.test_freq * sync == 8  # the same optimizer-step cadence at both lags
    # The paper's denominator (Table 9): the generating checkpoint's trainer-side log-prob; DPPO needs mu.
    assert cfg.algorithm.rollout_correction.bypass_mode is name.startswith("dppo") and ro.calculate_log_probs
    # Megatron training, SGLang rollout on separate GPUs.
    assert aa.strategy == "megatron" and ro.name == "sglang" and cfg.actor_rollout_ref.hybrid_engine is False
    # R3 exactly where the name says so.
    r3 = "_r3_" in name
    assert aa.megatron.router_replay.mode == ("R3" if r3 else "disabled")
    assert ro.enable_rollout_routing_replay is r3
    # Lag: sat_ext's separate_async trainer, a broadcast every `lag` optimizer steps, one batch prefetched,
    # plus the constraints PPOTrainerSeparateAsync asserts at start-up, and sat_ext's sampler.
    assert tr.use_v1 is True and v1.trainer_mode == "sat_separate_async" and sync == lag
    assert cfg.data.train_batch_size == sync * aa.ppo_mini_batch_size
    assert ro.nnodes > 0 and ro.n_gpus_per_node > 0 and ro.checkpoint_engine.backend != "naive"
    sampler = v1.sampler
    assert (sampler.custom_sampler.path, sampler.custom_sampler.name) == ("pkg://sat_ext.verl.lag_sampler",
                                                                          "SATLagReplayBuffer")
    assert v1.separate_async.num_warmup_batches * cfg.data.train_batch_size == 256  # one batch ahead
    assert sampler.max_off_policy_threshold is None
    kw = sampler.sampler_kwargs
    assert (kw.mode, kw.interval, kw.prefetch) == ("interval", lag, 1)


_LAG_BLOCKS = {1: {"mode": "interval", "interval": 1, "prefetch": 1}, 8: {"mode": "interval", "interval": 8, "prefetch": 1}}


@pytest.mark.parametrize("lag", sorted(_LAG_BLOCKS))
def test_lag_files_are_sat_ext_lags_translation(lag, composed):
    """lag/lagK.yaml == sat_ext.verl.lag_overrides.verl_overrides(lag block, 256 prompts, eval every 8), key by key."""
    from sat_ext.lag import LagConfig, check_compatible
    from sat_ext.verl.lag_overrides import BASE_MODE, check_verl_config, verl_engine_settings, verl_overrides

    block = LagConfig.from_dict(_LAG_BLOCKS[lag])
    overrides = verl_overrides(block, train_batch_size=256, eval_every=8)
    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        translated = compose("ppo_megatron_trainer", overrides=overrides)
    keys = [o.lstrip("+").split("=", 1)[0] for o in overrides]
    assert set(keys) <= set(_set_keys(CONFIG_DIR / "lag" / f"lag{lag}.yaml"))  # the lag file sets them all
    for name in (v for v in VARIANTS if v.endswith(f"_lag{lag}")):
        cfg = composed[name]
        for key in keys:
            if key != "algorithm.rollout_correction.bypass_mode" or not name.startswith("dppo"):
                assert OmegaConf.select(cfg, key) == OmegaConf.select(translated, key), (name, key)
        mode = cfg.trainer.v1.trainer_mode
        check_compatible(LagConfig.from_dict(OmegaConf.to_container(cfg.trainer.v1.sampler.sampler_kwargs)),
                         verl_engine_settings(mode, cfg.trainer.v1[BASE_MODE]))
        assert check_verl_config(cfg) == {}


def test_documented_lag_schedules_are_sat_ext_lags():
    """The lag-8 file's comment states sat_ext.lag's interval schedule with one batch ahead: 1..8 steps."""
    from sat_ext.lag.schedule import scheduled_lag

    assert [scheduled_lag(s, 8, 1)[1] for s in range(10, 18)] == list(range(1, 9))
    assert "lags\n#   1, 2, ..., 8 (mean 4.5)" in (CONFIG_DIR / "lag" / "lag8.yaml").read_text()


# ------------------------------------------------------------------------------------------------- run.sh


def _dry_run(*args: str, **env: str) -> list[str]:
    out = subprocess.run(["bash", str(EXAMPLE / "run.sh"), *args], capture_output=True, text=True, check=True,
                         env={**os.environ, "SAT_DRY_RUN": "1", **env})
    return out.stdout.splitlines()


def test_run_sh_builds_the_main_ppo_command():
    cmd = _dry_run("sat_gspo_r3_lag8", "trainer.logger=[console,wandb]", TRAIN_NNODES="2", GPUS_PER_NODE="4")
    assert cmd[1:7] == ["-m", "sat_ext.verl.main_ppo", "--config-path", str(CONFIG_DIR), "--config-name",
                        "sat_gspo_r3_lag8"]
    assert cmd[7:] == ["trainer.nnodes=2", "trainer.n_gpus_per_node=4",
                       "actor_rollout_ref.rollout.n_gpus_per_node=4", "trainer.logger=[console,wandb]"]
    listed = subprocess.run(["bash", str(EXAMPLE / "run.sh"), "--list"], capture_output=True, text=True,
                            check=True).stdout.split()
    assert listed == VARIANTS
    bad = subprocess.run(["bash", str(EXAMPLE / "run.sh"), "no_such_variant"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown variant" in bad.stderr


def test_run_sh_overrides_compose(composed):
    # The overrides run.sh adds are valid Hydra overrides of existing keys (no `+` needed).
    cmd = _dry_run("grpo_lag1", TRAIN_NNODES="2", ROLLOUT_NNODES="2", GPUS_PER_NODE="8")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose("grpo_lag1", overrides=cmd[7:])
    assert (cfg.trainer.nnodes, cfg.actor_rollout_ref.rollout.nnodes, cfg.trainer.n_gpus_per_node) == (2, 2, 8)


BACKGROUND_USERS = ("test_main_ppo_cli_composes_the_variant",)


def start_background():
    """The real entry point: run.sh -> python -m sat_ext.verl.main_ppo ... --cfg job (prints, then exits)."""
    from _background import start

    def build(workdir: Path) -> list[str]:
        return ["bash", str(EXAMPLE / "run.sh"), "sat_gspo_r3_lag1", "--cfg", "job", "--resolve"]

    env = {**os.environ, "PYTHON": sys.executable, "SAT_DATA_DIR": "/data/sat_aime_test"}
    return start(build, env=env)


def test_main_ppo_cli_composes_the_variant():
    job = globals().get("_BACKGROUND_JOB") or start_background()
    rc, out, err = job.wait(timeout=180)
    assert rc == 0, err[-3000:]
    cfg = OmegaConf.create(out)
    pl = cfg.actor_rollout_ref.actor.policy_loss
    assert pl._target_ == SAT_TARGET and pl.loss_mode == "sat_gspo" and pl.sat_gspo_gate_level == "broadcast"
    assert cfg.data.train_files == "/data/sat_aime_test/train.parquet"
    assert cfg.actor_rollout_ref.actor.megatron.router_replay.mode == "R3"
    assert cfg.trainer.v1.sampler.custom_sampler.name == "SATLagReplayBuffer"
