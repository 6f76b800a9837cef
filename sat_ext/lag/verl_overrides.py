"""Translate a user's ``lag:`` block into verl 0.9.1 Hydra overrides, and read verl's settings back (stdlib only).

Both modes run on verl's V1 async trainer (``trainer.use_v1=true``) with the sampler
:class:`sat_ext.lag.verl_sampler.LagBoundedReplayBuffer` plugged in through verl's own
``trainer.v1.sampler.custom_sampler`` hook. One verl global step ends with one weight sync, so the
policy version trained on at global step t is t - 1.

- bounded (``max_lag L``): one optimizer update per sync (``parameter_sync_step=1``), verl's span bound
  ``max_off_policy_threshold=L+1`` (drop) underneath, and the sampler's exact per-trajectory check;
  ``num_warmup_batches`` (how many batches rollout runs ahead) is capped at L.
- interval (``interval k``): ``parameter_sync_step=k`` (k optimizer updates of ``train_batch_size`` prompts
  between syncs), ``data.train_batch_size=k*B``, no prefetch (verl's V1 rollout always resumes in-flight
  requests on new weights, so a prefetched sample would span syncs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .config import EngineSettings, LagConfig, LagConfigError

SAMPLER_PATH = "pkg://sat_ext.lag.verl_sampler"
SAMPLER_NAME = "LagBoundedReplayBuffer"
ASYNC_MODES = ("separate_async", "colocate_async")


def _sampler_kwargs(cfg: LagConfig) -> list[str]:
    block = {k: v for k, v in cfg.to_dict().items() if k in ("mode", "max_lag", "interval", "over_bound", "hist_edges")}
    out = []
    for key, value in block.items():
        if value is None:
            continue
        if isinstance(value, list):
            value = "[" + ",".join(str(v) for v in value) + "]"
        out.append(f"+trainer.v1.sampler.sampler_kwargs.{key}={value}")
    return out


def verl_overrides(
    lag: LagConfig | Mapping[str, Any], train_batch_size: int, trainer_mode: str = "separate_async"
) -> list[str]:
    """Hydra overrides for verl's ``ppo_trainer`` config that implement ``lag``.

    train_batch_size: prompts per trainer step (one optimizer update), what a user would set as
        ``data.train_batch_size`` without lag control. trainer_mode: verl's V1 async trainer to use.
    """
    cfg = lag if isinstance(lag, LagConfig) else LagConfig.from_dict(lag)
    if cfg.mode == "off":
        return []
    if not isinstance(train_batch_size, int) or isinstance(train_batch_size, bool) or train_batch_size < 1:
        raise LagConfigError("data.train_batch_size", train_batch_size, "must be an integer >= 1")
    if trainer_mode not in ASYNC_MODES:
        raise LagConfigError(
            "trainer.v1.trainer_mode", trainer_mode, f"must be one of {'|'.join(ASYNC_MODES)} for lag control"
        )
    if cfg.over_bound == "regenerate":
        raise LagConfigError(
            "lag.over_bound",
            cfg.over_bound,
            "is not available on verl: its sampler can only replace an evicted group with a fresh prompt from the "
            "dataloader; use lag.over_bound=drop",
        )
    if cfg.mode == "interval" and cfg.prefetch != 0:
        raise LagConfigError(
            "lag.prefetch",
            cfg.prefetch,
            "must be 0 on verl: V1 rollout resumes in-flight requests on new weights, so a prefetched sample "
            "would span syncs and leave the schedule",
        )
    if cfg.mode == "interval" and trainer_mode != "separate_async":
        raise LagConfigError(
            "trainer.v1.trainer_mode",
            trainer_mode,
            "must be separate_async with lag.mode=interval (parameter_sync_step)",
        )
    out = [
        "trainer.use_v1=true",
        f"trainer.v1.trainer_mode={trainer_mode}",
        f"trainer.v1.sampler.custom_sampler.path={SAMPLER_PATH}",
        f"trainer.v1.sampler.custom_sampler.name={SAMPLER_NAME}",
    ]
    if cfg.mode == "bounded":
        sync_every, warmup = 1, min(cfg.max_lag, 1)
        out += [
            f"trainer.v1.sampler.max_off_policy_threshold={cfg.max_lag + 1}",
            "trainer.v1.sampler.max_off_policy_strategy=drop",
        ]
    else:
        sync_every, warmup = cfg.interval, 0
        out += ["trainer.v1.sampler.max_off_policy_threshold=null"]
    out += [f"trainer.v1.{trainer_mode}.num_warmup_batches={warmup}"]
    if trainer_mode == "separate_async":
        out += [f"trainer.v1.separate_async.parameter_sync_step={sync_every}"]
    out += [
        f"data.train_batch_size={sync_every * train_batch_size}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={train_batch_size}",
    ]
    return out + _sampler_kwargs(cfg)


def verl_engine_settings(trainer_mode: str, trainer_config: Mapping[str, Any]) -> EngineSettings:
    """What verl's V1 trainer ``trainer_mode`` will do, read from its ``trainer.v1.<trainer_mode>`` block."""
    if trainer_mode not in ASYNC_MODES:
        raise LagConfigError(
            "trainer.v1.trainer_mode", trainer_mode, f"must be one of {'|'.join(ASYNC_MODES)} for lag control"
        )
    sync_every = int(trainer_config.get("parameter_sync_step", 1))
    warmup = trainer_config.get("num_warmup_batches", 1)
    prefix = f"trainer.v1.{trainer_mode}"
    return EngineSettings(
        engine=f"verl {trainer_mode}",
        # V1 async trainers always resume aborted requests on the new weights (FullyAsyncLLMServerClient)
        partial_rollout=True,
        oversampling=False,
        # trajectories carry min_global_steps / max_global_steps
        reports_sample_versions=True,
        prefetch_steps=math.ceil(warmup) * sync_every,
        sync_every=sync_every,
        keys={
            "prefetch_steps": f"{prefix}.num_warmup_batches",
            "sync_every": f"{prefix}.parameter_sync_step",
            "partial_rollout": f"{prefix} (partial rollout, always on)",
            "oversampling": f"{prefix} (oversampling)",
        },
    )
