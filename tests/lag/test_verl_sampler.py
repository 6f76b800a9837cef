"""LagBoundedReplayBuffer with verl 0.9.1's real classes and a real TransferQueue on a CPU Ray cluster.

Needs the ``transfer_queue`` package (verl's ``verl-core`` extra: TransferQueue plus pyzmq, msgspec,
cachetools, uvicorn, fastapi, starlette); skipped without it.
"""

from __future__ import annotations

import os
import uuid

import pytest

pytest.importorskip("verl")
tq = pytest.importorskip("transfer_queue")
import verl  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import get_trainer_cls  # noqa: E402

from sat_ext.lag import LagConfig, LagConfigError  # noqa: E402
from sat_ext.lag.verl_overrides import verl_overrides  # noqa: E402
from sat_ext.lag.verl_sampler import LagBoundedReplayBuffer  # noqa: E402

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
GPU_FREE = [
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
]


@pytest.fixture(scope="module")
def transfer_queue(ray_session):
    # TransferQueue's controller and each storage unit reserve one CPU: one unit fits in num_cpus=2
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield
    tq.close()


@pytest.fixture
def clean_partition(transfer_queue):
    yield
    data = tq.kv_list("train") or {}
    keys = list(data.get("train", {}))
    if keys:
        tq.kv_clear(keys=keys, partition_id="train")


def _compose(overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides + GPU_FREE)


def _sampler(lag: LagConfig, refills: list[int], stock: bool = False):
    cfg = _compose(verl_overrides(lag, train_batch_size=2))
    sampler = cfg.trainer.v1.sampler
    cls = ReplayBufferAsync if stock else LagBoundedReplayBuffer
    return cls(
        trainer_mode=cfg.trainer.v1.trainer_mode,
        trainer_config=cfg.trainer.v1.separate_async,
        max_off_policy_threshold=sampler.max_off_policy_threshold,
        max_off_policy_strategy=sampler.max_off_policy_strategy,
        sampler_kwargs=sampler.sampler_kwargs,
        refill_fn=refills.append,
        poll_interval=0.05,
    )


def _put_group(prompt_step: int, oldest: list[int], newest: int | None = None) -> str:
    """One finished prompt group: its prompt tag and one trajectory per entry of ``oldest``."""
    uid = str(uuid.uuid4())
    tq.kv_batch_put(
        keys=[uid], partition_id="train", tags=[{"is_prompt": True, "status": "finished", "global_steps": prompt_step}]
    )
    keys = [f"{uid}_{i}_0" for i in range(len(oldest))]
    tags = [
        {
            "status": "success",
            "global_steps": prompt_step,
            "min_global_steps": o,
            "max_global_steps": newest if newest is not None else o,
        }
        for o in oldest
    ]
    tq.kv_batch_put(keys=keys, partition_id="train", tags=tags)
    return uid


def test_verl_trainer_builds_the_sampler_through_its_custom_sampler_hook(transfer_queue):
    cfg = _compose(verl_overrides({"mode": "interval", "interval": 4}, train_batch_size=8))
    trainer = get_trainer_cls("separate_async")(cfg)  # verl's own constructor and assertions, no GPU touched
    assert isinstance(trainer.replay_buffer, LagBoundedReplayBuffer)
    assert trainer.replay_buffer.lag == LagConfig(mode="interval", interval=4)
    assert trainer.replay_buffer.sync_every == 4


def test_sampler_rejects_a_warmup_that_breaks_the_bound(transfer_queue):
    cfg = _compose(
        verl_overrides({"mode": "bounded", "max_lag": 1}, train_batch_size=8)
        + ["trainer.v1.separate_async.num_warmup_batches=2"]
    )
    with pytest.raises(LagConfigError, match="num_warmup_batches"):
        get_trainer_cls("separate_async")(cfg)


def test_bounded_sampler_evicts_by_token_lag_not_by_submission(clean_partition):
    lag = LagConfig(mode="bounded", max_lag=1)
    # at global step 4 the trainer trains on version 3
    fresh = _put_group(prompt_step=3, oldest=[2, 3])  # lags 1, 0
    late_start = _put_group(prompt_step=1, oldest=[3, 3])  # submitted long ago, generated on version 3: lag 0
    stale = _put_group(prompt_step=2, oldest=[1, 2], newest=3)  # one trajectory started on version 1: lag 2
    refills: list[int] = []
    sampler = _sampler(lag, refills)
    stock = _sampler(lag, [], stock=True)

    stock._sync_metadata_from_transfer_queue()
    assert stock._stale_terminal_keys(4, "train") == {late_start, stale}  # verl's span rule (threshold L+1 = 2)
    sampler._sync_metadata_from_transfer_queue()
    assert sampler._stale_terminal_keys(4, "train") == {stale}  # the exact rule keeps the late starter

    batch, metrics = sampler.sample(global_steps=4, partition_id="train", batch_size=2)
    assert {k.split("_")[0] for k in batch.keys} == {fresh, late_start}
    assert refills == [1]  # verl's refill replaced the evicted group
    assert metrics["lag/dropped"] == 2 and metrics["lag/dropped_total"] == 2  # its two trajectories
    assert metrics["training/off_policy/evicted_samples"] == 1  # verl's own count, in groups
    assert (metrics["lag/min"], metrics["lag/max"], metrics["lag/consumed"]) == (0.0, 1.0, 4.0)
    assert (metrics["lag/hist/0"], metrics["lag/hist/1"]) == (3.0, 1.0)
    assert metrics["lag/version"] == 3.0 and "lag/producer_idle_s" not in metrics
    remaining = tq.kv_list("train").get("train", {})
    assert not any(k.split("_")[0] == stale for k in remaining)  # evicted from TransferQueue
    assert fresh not in remaining and late_start not in remaining  # the sampled prompts were released


def test_bounded_sampler_falls_back_to_the_submission_step_without_version_tags(clean_partition):
    uid = str(uuid.uuid4())
    tq.kv_batch_put(
        keys=[uid], partition_id="train", tags=[{"is_prompt": True, "status": "finished", "global_steps": 2}]
    )
    tq.kv_batch_put(keys=[f"{uid}_0_0"], partition_id="train", tags=[{"status": "success", "global_steps": 2}])
    sampler = _sampler(LagConfig(mode="bounded", max_lag=1), [])
    sampler._sync_metadata_from_transfer_queue()
    assert sampler._stale_terminal_keys(3, "train") == set()  # oldest <= 1: lag (3-1) - 1 = 1
    assert sampler._stale_terminal_keys(4, "train") == {uid}  # lag 2


def test_interval_sampler_logs_the_schedule_once_per_global_step(clean_partition):
    lag = LagConfig(mode="interval", interval=2)
    for _ in range(4):
        _put_group(prompt_step=3, oldest=[2])
    sampler = _sampler(lag, [])
    _, first = sampler.sample(global_steps=3, partition_id="train", batch_size=2)
    assert not any(k.startswith("lag/") for k in first)  # metrics come with the last local update
    _, second = sampler.sample(global_steps=3, partition_id="train", batch_size=2)
    # four trajectories on version 2 at global step 3: local updates 0 and 1 -> lag in steps 0 and 1
    assert (second["lag/max"], second["lag/steps/min"], second["lag/steps/max"]) == (0.0, 0.0, 1.0)
    assert second["lag/consumed"] == 4.0 and second["lag/trainer_step"] == 6.0
    assert (second["lag/scheduled_steps"], second["lag/off_schedule"]) == (1.0, 0.0)
