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
* the paper's setting, variant by variant, against ``PAPER``: a table written from the paper (Table 1's 13
  methods x lag 1 / 8, App. F's shared settings, Table 9's per-method ones), independently of the YAML;
* App. E.6's ``denominator=rollout`` switch on every GRPO / GSPO / SAT variant (refused with TIS), and the
  V1 separate_async constraints verl asserts at start-up.
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
from _background import Background  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from sat_ext.example_configs import variants  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "verl_aime_qwen3_30b"
CONFIG_DIR = EXAMPLE / "config"
VERL_CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"
GROUPS = ("method", "routing", "tis", "lag", "denominator")
VARIANTS = variants("verl_aime_qwen3_30b", REPO / "examples")
SAT_TARGET = "sat_ext.verl.config.SATPolicyLossConfig"

# Sections verl does not read in this setup: legacy top-level reward keys (main_ppo ignores them; only the
# fully_async entry point migrates them) and the critic (GRPO advantages: no critic). Setting a key here would
# have no effect, so the example must not. (The reference model is read: the KL loss needs it.)
IGNORED_PREFIXES = ("reward_model.", "custom_reward_function.", "sandbox_fusion.", "critic.", "distillation.")

# Megatron config fields the example passes through verl's free-form override dicts that verl's schema does
# not list. Checked against megatron.core's dataclasses when it is installed (a GPU machine); named here
# otherwise (megatron-core is not installed on the CPU machine that runs these tests).
MEGATRON_EXTRA = {
    "actor_rollout_ref.actor.megatron.override_transformer_config.": (
        "megatron.core.transformer",
        "TransformerConfig",
        {"moe_router_dtype", "attention_softmax_in_fp32"},
    ),
    "actor_rollout_ref.actor.megatron.override_ddp_config.": (
        "megatron.core.distributed",
        "DistributedDataParallelConfig",
        {"grad_reduce_in_fp32"},
    ),
    "actor_rollout_ref.actor.optim.override_optimizer_config.": (
        "megatron.core.optimizer",
        "OptimizerConfig",
        {
            "optimizer_cpu_offload",
            "optimizer_offload_fraction",
            "overlap_cpu_optimizer_d2h_h2d",
            "adam_beta1",
            "adam_beta2",
        },
    ),
}


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


def compose_variants(config_dir: Path, names: list[str]) -> dict[str, DictConfig]:
    """Each named variant of an example folder, composed by Hydra as `--config-name NAME` would."""
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return {name: compose(name) for name in names}


@pytest.fixture(scope="module")
def composed() -> dict[str, DictConfig]:
    return compose_variants(CONFIG_DIR, VARIANTS)


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


def _megatron_fields(module: str, cls: str) -> set[str] | None:
    from dataclasses import fields
    from importlib import import_module

    try:
        return {f.name for f in fields(getattr(import_module(module), cls))}
    except ImportError:
        return None


def _sat_fields() -> set[str]:
    from dataclasses import fields

    from sat_ext.verl.config import SATPolicyLossConfig

    return {f.name for f in fields(SATPolicyLossConfig)}


def _free_form_ok(key: str) -> bool:
    """A key under one of the free-form dicts the example uses, checked against what reads it."""
    if key.startswith("reward.reward_kwargs."):
        return key[len("reward.reward_kwargs.") :] in _dapo_reward_kwargs()
    for prefix, (module, cls, named) in MEGATRON_EXTRA.items():
        if key.startswith(prefix):
            megatron_fields = _megatron_fields(module, cls)
            return key[len(prefix) :] in (megatron_fields if megatron_fields is not None else named)
    prefix = "actor_rollout_ref.actor.policy_loss."
    if key.startswith(prefix):
        return key[len(prefix) :] in _sat_fields()
    prefix = "trainer.v1.sampler.sampler_kwargs."
    if key.startswith(prefix):  # handed to the custom sampler, sat_ext's SATLagReplayBuffer
        from dataclasses import fields

        from sat_ext.lag import LagConfig

        return key[len(prefix) :] in {f.name for f in fields(LagConfig)}
    # Ray's runtime_env accepts env_vars; main_ppo merges it into its default runtime env.
    return key.startswith("ray_kwargs.ray_init.runtime_env.env_vars.")


# ------------------------------------------------------------------------------------------------ the files


def test_every_variant_is_listed_and_named_after_its_parts():
    assert set(VARIANTS) == set(PAPER)  # one variant per row of Table 1 and lag, no others
    for name in VARIANTS:
        raw = _raw(CONFIG_DIR / f"{name}.yaml")
        assert raw["hydra"]["searchpath"] == ["pkg://verl.trainer.config"]
        choices = {k: v for d in raw["defaults"] if isinstance(d, dict) for k, v in d.items()}
        method, tis, r3, lag = re.fullmatch(r"(.+?)(_tis)?(_r3)?_lag(\d+)", name).groups()
        assert choices == {
            "method": method,
            "routing": "r3" if r3 else "none",
            "tis": "token" if tis else "none",
            "lag": f"lag{lag}",
            "denominator": "rollout" if method == "dppo_tv" else "checkpoint",
        }
        assert raw["defaults"][0] == "sat_aime_base" and raw["defaults"][-1] == "_self_"
        assert set(raw) == {"hydra", "defaults", "trainer"} and raw["trainer"] == {"experiment_name": name}


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
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from sat_ext.examples import math_reward

    for cfg in composed.values():
        assert cfg.reward.reward_manager.name == "dapo" and "dapo" in REWARD_MANAGER
        assert cfg.reward_model.reward_manager is None  # the silently ignored legacy key stays unset
        assert cfg.reward.reward_kwargs.max_resp_len == cfg.data.max_response_length
    # App. F's verifier, loaded by verl's own loader as its reward loop does (one composed config suffices:
    # the reward section is the base's)
    fn = get_custom_reward_fn(next(iter(composed.values())))
    assert fn.args[0] is math_reward.compute_score


def test_the_eval_count_is_the_configs_whatever_the_data(composed):
    """data.custom_cls is sat_ext's ConfigCountDataset (drops a file's __rollout_n__, which verl reads first), as
    verl resolves it; the count is then val_kwargs.n, App. F's 64 (tests/examples/test_prepare_data.py reads a
    file with __rollout_n__ = 8 through it)."""
    from verl.utils.dataset.rl_dataset import get_dataset_class

    from sat_ext.examples.verl_dataset import ConfigCountDataset

    for cfg in composed.values():
        assert get_dataset_class(cfg.data) is ConfigCountDataset
        assert cfg.actor_rollout_ref.rollout.val_kwargs.n == 64


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


def _ref_config(cfg: DictConfig):
    """The reference model's config as verl's ActorRolloutRefWorker builds it (log_prob_* keys renamed first)."""
    from verl.utils.config import omega_conf_to_dataclass

    ref = OmegaConf.create(OmegaConf.to_container(cfg.actor_rollout_ref, resolve=True)).ref
    renames = {
        "log_prob_micro_batch_size": "ppo_micro_batch_size",
        "log_prob_micro_batch_size_per_gpu": "ppo_micro_batch_size_per_gpu",
        "log_prob_use_dynamic_bsz": "use_dynamic_bsz",
        "log_prob_max_token_len_per_gpu": "ppo_max_token_len_per_gpu",
    }
    for old, new in renames.items():
        ref[new] = ref.pop(old, None)
    ref.ppo_mini_batch_size = cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    return omega_conf_to_dataclass(ref)


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
    assert need_reference_policy(cfg) and not need_critic(cfg)  # the KL loss's ref is built; critic.* unused
    validate_config(cfg, use_reference_policy=True, use_critic=False)

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    assert isinstance(actor, McoreActorConfig) and isinstance(rollout, RolloutConfig)

    # Every value the example sets reaches the dataclass verl builds from it.
    ref = _ref_config(cfg)
    sections = {
        "actor_rollout_ref.actor.": actor,
        "actor_rollout_ref.rollout.": rollout,
        "algorithm.": algo,
        "actor_rollout_ref.ref.": ref,
    }
    for key, raw_value in _example_keys_for(name).items():
        expected = _lookup(resolved, key)[1]
        for prefix, obj in sections.items():
            if key.startswith(prefix):
                got = _attr(obj, key[len(prefix) :])
                if key.endswith("._target_") or ".override_" in key:  # free-form dicts: checked above
                    continue
                got = list(got) if isinstance(got, (list, tuple)) else got
                assert got == expected, f"{key}: dataclass has {got!r}, config {expected!r}"

    loss_mode = actor.policy_loss.loss_mode
    assert callable(get_policy_loss_fn(loss_mode))
    assert loss_mode == PAPER[name]["loss"]


@pytest.mark.parametrize("name", [v for v in VARIANTS if v.startswith("sat_")])
def test_sat_variants_get_sats_intended_config(name, composed):
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass

    from sat_ext.core import SATConfig
    from sat_ext.verl.config import SATPolicyLossConfig, sat_config_for
    from sat_ext.verl.loss import compute_policy_loss_sat, compute_policy_loss_sat_gspo

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
    expected = SATConfig(
        eps_low=a["clip_ratio_low"],
        eps_high=a["clip_ratio_high"],
        dual_clip=a["clip_ratio_c"] if loss == "sat" else None,
        **knobs,
    )
    assert sat_config_for(actor, loss) == expected
    if loss == "sat":
        assert (expected.eps_low, expected.eps_high, expected.dual_clip) == (0.2, 0.2, 3.0)
        assert actor.loss_agg_mode == "token-mean"
    else:
        assert (expected.eps_low, expected.eps_high) == (0.2, 0.2)  # the paper's, GSPO included (Table 9)
        assert actor.loss_agg_mode == "seq-mean-token-mean"
    # the knobs spelled out are SAT's defaults, which are the paper's
    assert expected == SATConfig(eps_low=0.2, eps_high=0.2, dual_clip=expected.dual_clip)


# ------------------------------------------------------------------------------- the paper's values, per variant
# Written from the paper (not from the YAML): App. F's shared settings, Table 9's per-method ones, Table 1's rows.
# Where the paper is silent or contradicts itself, the choice is the README's and is marked "choice".
APP_F = {
    "optimizer": ("adam", (0.9, 0.98), 1e-6, 0, "constant", 0.0),  # betas, constant lr, no warm-up; wd: choice
    "kl": (True, "low_var_kl", 1e-3),
    "entropy_coeff": 0.0,
    "train_gpus": (1, 4),  # one node; GPUs 0-3 train
    "rollout_gpus": (1, 4),  # GPUs 4-7 roll out
    "parallel": {"tp": 4, "pp": 1, "cp": 1, "ep": 4, "etp": 1, "sp": True},
    "precision": ("bfloat16", True, True, "flash"),  # bf16, fp32 grad all-reduce, fp32 softmax, FlashAttention
    "sglang_mem_fraction": 0.85,
    "batch": (256, 16, 1),  # prompts x samples per optimizer step, one update per batch
    "optimizer_steps": 544,
    "response_cap": 32768,
    "dynamic_batch_tokens_per_gpu": 32768,
    "sampling": (1.0, 1.0, -1),  # temperature (App. F / E.5; §5.1 says 0.95: choice), top-p, top-k
}
EVAL_EVERY = {1: 5, 8: 8}  # App. F: every 5 iterations; lag 8 can only validate between broadcasts (every 8)
EVAL_N = 64  # App. F: 16 samples x 4 runs = the mean over 64 per problem
TABLE_1 = {  # method -> (loss, radii or DPPO's delta, Table 9's rollout log-prob need, SAT)
    "grpo": ("vanilla", (0.2, 0.2), False, False),
    "gspo": ("gspo", (0.2, 0.2), False, False),
    "dppo_tv": ("dppo_tv", (1e-3, 1e-3), True, False),
    "sat_grpo": ("sat", (0.2, 0.2), False, True),
    "sat_gspo": ("sat_gspo", (0.2, 0.2), False, True),
}
TABLE_1_ROWS = [  # (method, TIS, R3): the 13 rows of Table 1
    ("grpo", False, False),
    ("gspo", False, False),
    ("grpo", False, True),
    ("gspo", False, True),
    ("grpo", True, False),
    ("gspo", True, False),
    ("grpo", True, True),
    ("gspo", True, True),
    ("dppo_tv", False, False),
    ("sat_grpo", False, False),
    ("sat_gspo", False, False),
    ("sat_grpo", False, True),
    ("sat_gspo", False, True),
]
TIS_CAP = 2.0  # the paper does not state C: verl's default (choice)
PAPER = {
    f"{method}{'_tis' if tis else ''}{'_r3' if r3 else ''}_lag{lag}": {
        **APP_F,
        "loss": TABLE_1[method][0],
        "radii": TABLE_1[method][1],
        "denominator": "rollout" if TABLE_1[method][2] else "checkpoint",
        "sat": TABLE_1[method][3],
        "r3": r3,
        "tis": ("token", TIS_CAP) if tis else None,
        "lag": (lag, 1),  # a broadcast every `lag` optimizer steps, the rollout one batch ahead
        "eval": (EVAL_N, EVAL_EVERY[lag]),
    }
    for method, tis, r3 in TABLE_1_ROWS
    for lag in (1, 8)
}


def _settings(cfg: DictConfig) -> dict:
    """The PAPER keys, read from a composed config through the dataclasses verl builds from it."""
    from verl.utils.config import omega_conf_to_dataclass

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    ro = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    tr, mg, opt = cfg.trainer, actor.megatron, actor.optim
    sync = tr.v1.separate_async.parameter_sync_step
    corr = cfg.algorithm.rollout_correction  # verl reads it from the DictConfig (trainer_base._compute_*)
    kw = tr.v1.sampler.sampler_kwargs
    assert (kw.mode, kw.interval) == ("interval", sync)
    return {
        "optimizer": (
            opt.optimizer,
            tuple(opt.betas),
            opt.lr,
            opt.lr_warmup_steps_ratio + max(opt.lr_warmup_steps, 0),
            opt.lr_decay_style,
            opt.weight_decay,
        ),
        "kl": (actor.use_kl_loss, actor.kl_loss_type, actor.kl_loss_coef),
        "entropy_coeff": actor.entropy_coeff,
        "train_gpus": (tr.nnodes, tr.n_gpus_per_node),
        "rollout_gpus": (ro.nnodes, ro.n_gpus_per_node),
        "parallel": {
            "tp": mg.tensor_model_parallel_size,
            "pp": mg.pipeline_model_parallel_size,
            "cp": mg.context_parallel_size,
            "ep": mg.expert_model_parallel_size,
            "etp": mg.expert_tensor_parallel_size,
            "sp": mg.sequence_parallel,
        },
        "precision": (
            mg.dtype,
            mg.override_ddp_config["grad_reduce_in_fp32"],
            mg.override_transformer_config["attention_softmax_in_fp32"],
            mg.override_transformer_config["attention_backend"],
        ),
        "sglang_mem_fraction": ro.gpu_memory_utilization,
        "batch": (actor.ppo_mini_batch_size, ro.n, actor.ppo_epochs),
        "optimizer_steps": tr.total_training_steps * sync,
        "response_cap": cfg.data.max_response_length,
        "dynamic_batch_tokens_per_gpu": actor.ppo_max_token_len_per_gpu if actor.use_dynamic_bsz else None,
        "sampling": (ro.temperature, ro.top_p, ro.top_k),
        "eval": (ro.val_kwargs.n, tr.test_freq * sync),
        "loss": actor.policy_loss.loss_mode,
        "radii": (actor.clip_ratio_low, actor.clip_ratio_high),
        "denominator": "rollout" if corr.bypass_mode else "checkpoint",
        "sat": actor.policy_loss.loss_mode.startswith("sat"),
        "r3": mg.router_replay.mode == "R3",
        "tis": (corr.rollout_is, float(corr.rollout_is_threshold)) if corr.rollout_is else None,
        "lag": (sync, round(tr.v1.separate_async.num_warmup_batches * sync)),
    }


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_is_the_papers_row(name, composed):
    cfg = composed[name]
    assert _settings(cfg) == PAPER[name]
    ro, aa = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor
    # What the settings above rely on: R3 on both sides, rollout log-probs (DPPO, TIS, d_pi), SAT's defaults
    # (test_sat_variants_get_sats_intended_config), the sampled eval, the response cap vs the model's positions.
    assert ro.enable_rollout_routing_replay is PAPER[name]["r3"] and ro.calculate_log_probs is True
    assert ro.val_kwargs.do_sample is True and (ro.val_kwargs.temperature, ro.val_kwargs.top_p) == (1.0, 1.0)
    assert ro.max_model_len == 32768 and aa.ppo_max_token_len_per_gpu >= ro.max_model_len
    assert aa.optim.use_precision_aware_optimizer and aa.optim.override_optimizer_config.optimizer_cpu_offload
    # Megatron training, SGLang rollout on its own GPUs, V1 separate_async with sat_ext's sampler and trainer,
    # plus the constraints PPOTrainerSeparateAsync asserts at start-up.
    tr = cfg.trainer
    assert aa.strategy == "megatron" and ro.name == "sglang" and cfg.actor_rollout_ref.hybrid_engine is False
    assert tr.use_v1 is True and tr.v1.trainer_mode == "sat_separate_async"
    assert cfg.data.train_batch_size == tr.v1.separate_async.parameter_sync_step * aa.ppo_mini_batch_size
    assert ro.checkpoint_engine.backend != "naive" and tr.v1.sampler.max_off_policy_threshold is None
    assert (tr.v1.sampler.custom_sampler.path, tr.v1.sampler.custom_sampler.name) == (
        "pkg://sat_ext.verl.lag.sampler",
        "SATLagReplayBuffer",
    )


def test_the_paper_table_has_26_rows_and_the_papers_numbers():
    assert len(PAPER) == 26 == 2 * len(TABLE_1_ROWS)
    assert {row["loss"] for row in PAPER.values()} == {"vanilla", "gspo", "dppo_tv", "sat", "sat_gspo"}


@pytest.fixture(scope="module")
def rollout_denominator() -> dict[str, DictConfig]:
    """Every non-DPPO variant composed with App. E.6's switch, as run.sh and main_ppo pass it."""
    out = {}
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        for name in VARIANTS:
            if PAPER[name]["denominator"] == "checkpoint":
                out[name] = compose(name, overrides=["denominator=rollout"])
    return out


def test_rollout_denominator_switch_on_every_grpo_gspo_sat_variant(rollout_denominator):
    from verl.utils.config import validate_config

    from sat_ext.lag import LagConfigError
    from sat_ext.verl.lag.overrides import check_verl_config

    assert len(rollout_denominator) == 24
    for name, cfg in rollout_denominator.items():
        assert cfg.algorithm.rollout_correction.bypass_mode is True, name
        if PAPER[name]["tis"]:  # verl computes no IS weights in bypass mode: refused, naming the key
            with pytest.raises(LagConfigError) as err:
                check_verl_config(cfg)
            assert err.value.key == "algorithm.rollout_correction.rollout_is"
            continue
        assert check_verl_config(cfg) == {}
        validate_config(cfg, use_reference_policy=True, use_critic=False)
        # everything but the denominator is the variant's
        assert {k: v for k, v in _settings(cfg).items() if k != "denominator"} == {
            k: v for k, v in PAPER[name].items() if k != "denominator"
        }


def test_gspo_sequence_kl_is_verls_token_kl_under_its_aggregation():
    """Table 9: GSPO's KL is the per-sequence mean broadcast to the response's tokens. verl's per-token k3
    aggregated like the loss (seq-mean-token-mean, and token-mean too) gives the same value and gradient."""
    import torch
    from verl.trainer.ppo.core_algos import agg_loss, kl_penalty

    torch.manual_seed(0)
    mask = torch.rand(6, 40) < 0.7
    mask[:, 0] = True
    ref = torch.randn(6, 40) * 0.1 - 2
    for mode in ("seq-mean-token-mean", "token-mean"):
        grads = []
        for form in ("token", "sequence"):
            logp = (ref + torch.randn(6, 40, generator=torch.Generator().manual_seed(1)) * 0.05).requires_grad_()
            kld = kl_penalty(logprob=logp, ref_logprob=ref, kl_penalty="low_var_kl")
            if form == "sequence":
                seq = (kld * mask).sum(-1) / mask.sum(-1)
                kld = seq[:, None].expand_as(kld)
            loss = agg_loss(loss_mat=kld, loss_mask=mask, loss_agg_mode=mode)
            loss.backward()
            grads.append((loss.detach(), logp.grad))
        torch.testing.assert_close(grads[0][0], grads[1][0])
        torch.testing.assert_close(grads[0][1], grads[1][1])


def _megatron_optimizer_args(optim) -> dict:
    """The OptimizerConfig arguments verl 0.9.1's own ``init_megatron_optim_config`` builds for ``optim`` (the
    actor's composed ``optim`` block), with Megatron's OptimizerConfig and scheduler stood in for: megatron-core
    needs CUDA, so it is not installed here."""
    import importlib
    import sys
    import types

    captured = {}
    stand_ins = {name: types.ModuleType(name) for name in ("megatron", "megatron.core")}
    optimizer = types.ModuleType("megatron.core.optimizer")
    optimizer.OptimizerConfig = lambda **kwargs: captured.update(kwargs) or kwargs
    optimizer.get_megatron_optimizer = None
    scheduler = types.ModuleType("megatron.core.optimizer_param_scheduler")
    scheduler.OptimizerParamScheduler = None
    stand_ins.update({optimizer.__name__: optimizer, scheduler.__name__: scheduler})
    saved = {name: sys.modules.get(name) for name in [*stand_ins, "verl.utils.megatron.optimizer"]}
    sys.modules.update(stand_ins)
    sys.modules.pop("verl.utils.megatron.optimizer", None)
    try:
        importlib.import_module("verl.utils.megatron.optimizer").init_megatron_optim_config(optim)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return captured


@pytest.mark.parametrize("name", VARIANTS)
def test_megatron_gets_the_papers_adam_betas(name, composed):
    """App. F: Adam betas (0.9, 0.98). verl 0.9.1 hands Megatron no `betas` for Adam (only optimizer, lr, min_lr,
    clip_grad, weight decay and the override block): without override_optimizer_config.adam_beta1/2 Megatron would
    train with its default beta2 0.999 (found by the preflight's Megatron-to-FSDP mapping)."""
    optim = composed[name].actor_rollout_ref.actor.optim
    args = _megatron_optimizer_args(optim)
    assert (args.get("adam_beta1"), args.get("adam_beta2")) == tuple(optim.betas) == (0.9, 0.98)
    assert args["optimizer"] == "adam" and args["lr"] == 1e-6 and args["weight_decay"] == 0.0


_LAG_BLOCKS = {
    1: {"mode": "interval", "interval": 1, "prefetch": 1},
    8: {"mode": "interval", "interval": 8, "prefetch": 1},
}


@pytest.mark.parametrize("lag", sorted(_LAG_BLOCKS))
def test_lag_files_are_sat_ext_lags_translation(lag, composed):
    """lag/lagK.yaml + denominator/*.yaml == sat_ext.verl.lag.overrides.verl_overrides(lag block, 256 prompts,
    eval every 5 (lag 1) / 8 (lag 8), denominator), key by key."""
    from sat_ext.lag import LagConfig, check_compatible
    from sat_ext.verl.lag.overrides import VerlSchedule, check_verl_config, verl_engine_settings, verl_overrides

    block = LagConfig.from_dict(_LAG_BLOCKS[lag])
    translations = {}
    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        for denominator in ("checkpoint", "rollout"):
            overrides = verl_overrides(block, train_batch_size=256, eval_every=EVAL_EVERY[lag], denominator=denominator)
            translations[denominator] = overrides, compose("ppo_megatron_trainer", overrides=overrides)
    for name in (v for v in VARIANTS if v.endswith(f"_lag{lag}")):
        denominator = PAPER[name]["denominator"]
        overrides, translated = translations[denominator]
        keys = [o.lstrip("+").split("=", 1)[0] for o in overrides]
        files = _set_keys(CONFIG_DIR / "lag" / f"lag{lag}.yaml") | _set_keys(
            CONFIG_DIR / "denominator" / f"{denominator}.yaml"
        )
        assert set(keys) <= set(files)  # the two group files set them all
        cfg = composed[name]
        for key in keys:
            assert OmegaConf.select(cfg, key) == OmegaConf.select(translated, key), (name, key)
        check_compatible(
            LagConfig.from_dict(OmegaConf.to_container(cfg.trainer.v1.sampler.sampler_kwargs)),
            verl_engine_settings(VerlSchedule.of(cfg)),
        )
        assert check_verl_config(cfg) == {}


def test_documented_lag_schedules_are_sat_ext_lags():
    """The lag-8 file's comment states sat_ext.lag's interval schedule with one batch ahead: 1..8 steps."""
    from sat_ext.lag.schedule import scheduled_lag

    assert [scheduled_lag(s, 8, 1)[1] for s in range(10, 18)] == list(range(1, 9))
    assert "lags\n#   1, 2, ..., 8 (mean 4.5)" in (CONFIG_DIR / "lag" / "lag8.yaml").read_text()


# ------------------------------------------------------------------------------------------------- run.sh


LOG_ROOT_OVERRIDE = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_ROOT="


def _dry_run(*args: str, **env: str) -> list[str]:
    out = subprocess.run(
        ["bash", str(EXAMPLE / "run.sh"), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SAT_DRY_RUN": "1", "PYTHON": sys.executable, **env},
    )
    return out.stdout.splitlines()


def test_run_sh_builds_the_main_ppo_command(tmp_path):
    log_root = f"{LOG_ROOT_OVERRIDE}{tmp_path}"
    cmd = _dry_run("sat_gspo_r3_lag8", "trainer.logger=[console,wandb]", SAT_LOG_DIR=str(tmp_path))
    assert cmd[1:7] == [
        "-m",
        "sat_ext.verl.main_ppo",
        "--config-path",
        str(CONFIG_DIR),
        "--config-name",
        "sat_gspo_r3_lag8",
    ]
    assert cmd[7:] == ["trainer.logger=[console,wandb]", log_root]
    # App. E.6's switch names the run apart from its paper-denominator twin, unless the caller names it
    assert _dry_run("grpo_lag1", "denominator=rollout", SAT_LOG_DIR=str(tmp_path))[7:] == [
        "denominator=rollout",
        "trainer.experiment_name=grpo_lag1_rollout_lp",
        log_root,
    ]
    assert _dry_run("grpo_lag1", "denominator=rollout", "trainer.experiment_name=x", SAT_LOG_DIR=str(tmp_path))[7:] == [
        "denominator=rollout",
        "trainer.experiment_name=x",
        log_root,
    ]
    listed = subprocess.run(
        ["bash", str(EXAMPLE / "run.sh"), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listed == VARIANTS and len(listed) == 26
    bad = subprocess.run(["bash", str(EXAMPLE / "run.sh"), "no_such_variant"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown variant" in bad.stderr


def test_run_sh_takes_overrides_and_options_in_any_order(tmp_path):
    """Issue #23: `run.sh VARIANT denominator=rollout --cfg job` failed ("unrecognized arguments": run.sh appended
    its own override after the option). Every order gives Hydra the overrides first, then the options."""
    log_root = f"{LOG_ROOT_OVERRIDE}{tmp_path}"
    want = [
        "denominator=rollout",
        "trainer.total_training_steps=3",
        "trainer.experiment_name=grpo_lag1_rollout_lp",
        log_root,
        "--cfg",
        "job",
        "--resolve",
    ]
    for order in (
        ["denominator=rollout", "--cfg", "job", "trainer.total_training_steps=3", "--resolve"],
        ["--cfg", "job", "denominator=rollout", "--resolve", "trainer.total_training_steps=3"],
        ["denominator=rollout", "trainer.total_training_steps=3", "--cfg", "job", "--resolve"],
    ):
        assert _dry_run("grpo_lag1", *order, SAT_LOG_DIR=str(tmp_path))[7:] == want, order
    bad = subprocess.run(
        ["bash", str(EXAMPLE / "run.sh"), "grpo_lag1"],
        capture_output=True,
        text=True,
        env={**os.environ, "SAT_DRY_RUN": "1", "PYTHON": "/bin/false", "SAT_LOG_DIR": str(tmp_path)},
    )
    assert bad.returncode == 2 and "cannot import sat_ext" in bad.stderr


def test_hydra_argv_knows_hydras_options():
    """sat_ext.example_configs' list of Hydra options that take a value is Hydra's own (its parser)."""
    from hydra._internal.utils import get_args_parser

    from sat_ext.example_configs import HYDRA_INFO_CHOICES, HYDRA_INFO_OPTIONS, HYDRA_VALUE_OPTIONS, hydra_argv

    actions = [a for a in get_args_parser()._actions if a.option_strings]
    valued = {
        o
        for a in actions
        if a.nargs is None
        and not isinstance(a.const, bool)
        and a.const is None
        and a.__class__.__name__ == "_StoreAction"
        for o in a.option_strings
    }
    info = next(a for a in actions if "--info" in a.option_strings)
    assert valued == HYDRA_VALUE_OPTIONS
    assert set(info.option_strings) == HYDRA_INFO_OPTIONS and set(info.choices) == HYDRA_INFO_CHOICES
    assert hydra_argv(["--info", "a=1", "-i", "config", "--cfg=job", "b=2"]) == [
        "a=1",
        "b=2",
        "--info",
        "-i",
        "config",
        "--cfg=job",
    ]


def test_run_sh_overrides_compose(tmp_path):
    # What run.sh adds for the switch is a valid Hydra override (a group choice and an existing key).
    cmd = _dry_run("sat_grpo_r3_lag8", "denominator=rollout", SAT_LOG_DIR=str(tmp_path))
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose("sat_grpo_r3_lag8", overrides=cmd[7:])
    assert cfg.algorithm.rollout_correction.bypass_mode is True
    assert cfg.trainer.experiment_name == "sat_grpo_r3_lag8_rollout_lp"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_ROOT == str(tmp_path)
    assert list(cfg.trainer.logger) == ["console", "file"]


def start_background() -> Background:
    """The real entry point: run.sh -> python -m sat_ext.verl.main_ppo ... --cfg job (prints, then exits), with
    overrides and options interleaved as issue #23's failing command had them."""
    argv = [
        "bash",
        str(EXAMPLE / "run.sh"),
        "sat_gspo_r3_lag1",
        "denominator=rollout",
        "--cfg",
        "job",
        "trainer.total_training_steps=3",
        "--resolve",
    ]
    env = {**os.environ, "PYTHON": sys.executable, "SAT_DATA_DIR": "/data/sat_aime_test", "SAT_LOG_DIR": "logs"}
    return Background(argv, env=env)


def test_main_ppo_cli_composes_the_variant(background):
    assert background.wait(timeout=180) == 0, background.tail()
    cfg = OmegaConf.create(background.stdout)
    pl = cfg.actor_rollout_ref.actor.policy_loss
    assert pl._target_ == SAT_TARGET and pl.loss_mode == "sat_gspo" and pl.sat_gspo_gate_level == "broadcast"
    assert cfg.data.train_files == "/data/sat_aime_test/train.parquet"
    assert cfg.actor_rollout_ref.actor.megatron.router_replay.mode == "R3"
    assert cfg.trainer.v1.sampler.custom_sampler.name == "SATLagReplayBuffer"
    assert cfg.algorithm.rollout_correction.bypass_mode is True and cfg.trainer.total_training_steps == 3
    assert cfg.trainer.experiment_name == "sat_gspo_r3_lag1_rollout_lp"
    logs = (background.workdir / "logs").resolve()
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_ROOT == str(logs)
