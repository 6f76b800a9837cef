"""verl 0.9.1 V1 async sampler with sat_ext lag control, plugged in with ``trainer.v1.sampler.custom_sampler``.

Selected by the overrides from :func:`sat_ext.lag.verl_overrides.verl_overrides`; its settings arrive as
``trainer.v1.sampler.sampler_kwargs`` (the fields of :class:`~sat_ext.lag.config.LagConfig`).

At verl global step t the trainer trains on weights version t - 1 (one sync per global step). A
trajectory's oldest version is its ``min_global_steps`` tag (the version of its first generated segment),
or, when the engine did not report one, ``prompt global_steps - 1`` (the weights at submission, never
newer than the real oldest). Its lag is ``(t - 1) - oldest``; a group is evicted when any of its
trajectories is over ``lag.max_lag``, so no trained-on token is older than the bound. Metrics
(:mod:`sat_ext.lag.metrics`, counted per trajectory, without ``lag/producer_idle_s``, which the sampler
cannot observe) are returned by the last ``sample`` call of each global step.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from omegaconf import DictConfig, OmegaConf
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync
from verl.utils.skip import SkipManager

from .config import LagConfig, check_compatible
from .metrics import LagMetrics
from .schedule import scheduled_lag
from .verl_overrides import verl_engine_settings


class LagBoundedReplayBuffer(ReplayBufferAsync):
    """``ReplayBufferAsync`` that enforces ``lag.max_lag`` per trajectory and records per-trajectory lags."""

    def __init__(
        self,
        trainer_mode: str,
        trainer_config: DictConfig,
        max_off_policy_threshold: int | None,
        max_off_policy_strategy: str,
        sampler_kwargs: DictConfig,
        **kwargs,
    ):
        kwargs_block = (
            OmegaConf.to_container(sampler_kwargs) if isinstance(sampler_kwargs, DictConfig) else sampler_kwargs
        )
        self.lag = LagConfig.from_dict(kwargs_block)
        engine = verl_engine_settings(trainer_mode, trainer_config)
        check_compatible(self.lag, engine)
        super().__init__(
            trainer_mode=trainer_mode,
            trainer_config=trainer_config,
            max_off_policy_threshold=max_off_policy_threshold,
            max_off_policy_strategy=max_off_policy_strategy,
            sampler_kwargs=sampler_kwargs,
            **kwargs,
        )
        self.sync_every = engine.sync_every
        self.lag_metrics = LagMetrics(
            self.lag.hist_edges, interval_schedule=self.lag.mode == "interval", track_producer_idle=False
        )
        self._local_step = (None, 0)  # (global_steps, sample calls made at it)

    # ------------------------------------------------------------------ lag of trajectories

    def _trajectory_oldest(self, partition_id: str, key: str, tag: dict) -> int:
        oldest = tag.get("min_global_steps")
        if oldest is None:
            uid = key.split("_")[0]
            oldest = max(0, self.prompt_global_steps[partition_id].get(uid, tag.get("global_steps", 1)) - 1)
        return int(oldest)

    def _group_lags(self, global_steps: int, partition_id: str, uids: set[str]) -> dict[str, list[int]]:
        """Lags (in versions) of the trajectories of each group in ``uids`` if trained on at ``global_steps``."""
        lags: dict[str, list[int]] = defaultdict(list)
        for key, tag in self.partitions[partition_id].items():
            uid = key.split("_")[0]
            if uid in uids:
                lags[uid].append((global_steps - 1) - self._trajectory_oldest(partition_id, key, tag))
        return lags

    # ------------------------------------------------------------------ verl hooks

    def _stale_terminal_keys(self, global_steps: int, partition_id: str) -> set[str]:
        if partition_id == "val" or self.lag.mode != "bounded":
            return set()
        finished = set(self.finished_keys[partition_id])
        lags = self._group_lags(global_steps, partition_id, finished)
        return {uid for uid, group in lags.items() if max(group) > self.lag.max_lag}

    def _evict_terminal_groups(
        self,
        global_steps: int,
        partition_id: str,
        eviction_reasons: tuple[set[str], set[str], set[str], Counter],
    ) -> tuple[set[str], int, int, dict]:
        stale_uids = eviction_reasons[0]
        if stale_uids:
            dropped = sum(1 for key in self.partitions[partition_id] if key.split("_")[0] in stale_uids)
            self.lag_metrics.record_dropped(dropped)
        return super()._evict_terminal_groups(global_steps, partition_id, eviction_reasons)

    @SkipManager.annotate_tq(role="rollout_tq", phase="sample")
    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        """Sample like ``ReplayBufferAsync`` with the exact lag check; adds ``lag/*`` metrics once per global step."""
        if partition_id == "val":
            return super().sample(global_steps, partition_id, batch_size)
        start = time.perf_counter()
        sampleable, metrics = self.wait_for_sampleable(global_steps, partition_id, batch_size)
        self.lag_metrics.add_consumer_idle(time.perf_counter() - start)
        selected, snapshot, _ = self._select_prompt_uids(partition_id, sampleable, batch_size)

        last_step, calls = self._local_step
        local = calls if last_step == global_steps else 0
        self._local_step = (global_steps, local + 1)
        trainer_step = (global_steps - 1) * self.sync_every + local + 1
        scheduled = scheduled_lag(trainer_step, self.sync_every, 0) if self.lag.mode == "interval" else None
        for group in self._group_lags(global_steps, partition_id, set(selected)).values():
            for lag in group:
                if self.lag.mode == "bounded" and lag > self.lag.max_lag:
                    raise AssertionError(f"selected a trajectory with lag {lag} > lag.max_lag={self.lag.max_lag}")
                self.lag_metrics.record_consumed(lag, lag * self.sync_every + local, scheduled)

        batch = self._materialize_batch(partition_id, selected, snapshot)
        if local == self.sync_every - 1:
            metrics = dict(metrics)
            metrics.update(self.lag_metrics.flush(global_steps - 1, trainer_step, scheduled))
        return batch, metrics
