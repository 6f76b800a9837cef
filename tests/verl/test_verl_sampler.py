"""SATLagReplayBuffer with verl 0.9.1's real classes and a real TransferQueue on a CPU Ray cluster.

Needs the ``transfer_queue`` package (verl's ``verl-core`` extra: TransferQueue plus pyzmq, msgspec,
cachetools, uvicorn, fastapi, starlette); skipped without it.
"""

from __future__ import annotations

import os
import uuid

import pytest
import ray
import torch

pytest.importorskip("verl")
tq = pytest.importorskip("transfer_queue")
import _verl_rollout  # noqa: E402
import verl  # noqa: E402
from _verl_rollout import Rollout, drive  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import get_trainer_cls  # noqa: E402

from sat_ext.lag import LagConfig, LagConfigError  # noqa: E402
from sat_ext.lag.schedule import scheduled_version  # noqa: E402
from sat_ext.runlog import Expectation, Record, check_lag_schedule  # noqa: E402
from sat_ext.verl.lag.overrides import BASE_MODE, TRAINER_MODE, verl_overrides  # noqa: E402
from sat_ext.verl.lag.prepared import UnpreparedConfigError, prepare_verl_config  # noqa: E402
from sat_ext.verl.lag.sampler import SATLagReplayBuffer  # noqa: E402
from sat_ext.verl.lag.trainer import SATSeparateAsyncTrainer, batch_version, kept_versions  # noqa: E402

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
GPU_FREE = [
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
]


@pytest.fixture(scope="module")
def ray_session():
    """One real Ray session (2 CPUs) for this module; the rollout stand-in's module travels by value (a Ray
    worker cannot import tests/verl modules)."""
    from ray import cloudpickle

    if ray.is_initialized():  # another module left its session up: share it, leave it to its owner
        yield ray
        return
    cloudpickle.register_pickle_by_value(_verl_rollout)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never join another
    try:
        yield ray
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(_verl_rollout)


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


def _user_config(overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides + GPU_FREE)


def _compose(overrides):
    """The config the workers get, as ``python -m sat_ext.verl.main_ppo`` prepares it."""
    return prepare_verl_config(_user_config(overrides))


def _sampler(lag: LagConfig, refills: list[int] | None = None, stock: bool = False, batch_size: int = 2):
    cfg = _compose(verl_overrides(lag, train_batch_size=batch_size))
    sampler = cfg.trainer.v1.sampler
    if stock:  # verl's own sampler with its span rule at the same bound
        return ReplayBufferAsync(
            trainer_mode=BASE_MODE,
            trainer_config=cfg.trainer.v1.separate_async,
            max_off_policy_threshold=lag.max_lag + 1,
            max_off_policy_strategy="drop",
            sampler_kwargs={},
            refill_fn=(refills if refills is not None else []).append,
            poll_interval=0.005,
        )
    return SATLagReplayBuffer(
        trainer_mode=cfg.trainer.v1.trainer_mode,
        trainer_config=cfg.trainer.v1.separate_async,
        max_off_policy_threshold=sampler.max_off_policy_threshold,
        max_off_policy_strategy=sampler.max_off_policy_strategy,
        sampler_kwargs=sampler.sampler_kwargs,
        refill_fn=(refills if refills is not None else []).append,
        poll_interval=0.005,
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
    lag = LagConfig(mode="interval", interval=4, prefetch=1)
    cfg = _compose(verl_overrides(lag, train_batch_size=8))
    trainer = get_trainer_cls(TRAINER_MODE)(cfg)  # verl's own constructor and assertions, no GPU touched
    assert isinstance(trainer, SATSeparateAsyncTrainer) and isinstance(trainer.replay_buffer, SATLagReplayBuffer)
    assert trainer.replay_buffer.lag == lag and trainer.replay_buffer.sync_every == 4
    assert trainer.parameter_sync_step == 4  # verl's base class read it from the mirrored block
    assert trainer.bypass is False and trainer._enable_hybrid_replicas is False


def test_trainer_forwards_filter_groups_in_bounded_mode(transfer_queue):
    cfg = _compose(
        verl_overrides({"mode": "bounded", "max_lag": 1}, train_batch_size=8)
        + ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
    )
    trainer = get_trainer_cls(TRAINER_MODE)(cfg)
    assert trainer.replay_buffer.filter_groups_metric == "acc"  # verl's DAPO eviction runs in the sampler


def test_the_launcher_rejects_a_warmup_that_breaks_the_bound():
    cfg = _user_config(
        verl_overrides({"mode": "bounded", "max_lag": 1}, train_batch_size=8)
        + ["trainer.v1.separate_async.num_warmup_batches=2"]
    )
    with pytest.raises(LagConfigError, match="num_warmup_batches"):
        prepare_verl_config(cfg)


def test_the_trainer_refuses_a_config_the_launcher_did_not_prepare():
    cfg = _user_config(verl_overrides({"mode": "interval", "interval": 2, "prefetch": 1}, train_batch_size=8))
    with pytest.raises(UnpreparedConfigError, match=r"python -m sat_ext\.verl\.main_ppo"):
        get_trainer_cls(TRAINER_MODE)(cfg)


def test_kept_weights_cover_every_batch_of_the_window():
    for n, p in [(1, 1), (8, 1), (8, 0), (4, 6)]:
        cfg = LagConfig(mode="interval", interval=n, prefetch=p)
        for t in range(1, 12):  # global step t: trainer steps (t-1)n+1 .. tn, trainer weights version t-1
            needed = {scheduled_version(s, n, p) for s in range((t - 1) * n + 1, t * n + 1)}
            assert needed <= set(kept_versions(cfg, t - 1)), (n, p, t)
    assert len(kept_versions(LagConfig(mode="interval", interval=8, prefetch=1), 5)) == 2  # the paper's lag 8


def test_batch_version_refuses_a_mixed_batch():
    assert batch_version([{"min_global_steps": 3, "max_global_steps": 3}] * 2) == 3
    with pytest.raises(RuntimeError, match="one weight version"):
        batch_version([{"min_global_steps": 2, "max_global_steps": 3}])
    with pytest.raises(RuntimeError, match="one weight version"):
        batch_version([{"min_global_steps": 2, "max_global_steps": 2}, {"min_global_steps": 3, "max_global_steps": 3}])


def test_drop_mode_evicts_by_token_lag_and_counts_lengths(clean_partition):
    lag = LagConfig(mode="bounded", max_lag=1, over_bound="drop")
    # at global step 4 the trainer trains on version 3
    fresh = _put_group(prompt_step=3, oldest=[2, 3])  # lags 1, 0
    late_start = _put_group(prompt_step=1, oldest=[3, 3])  # submitted long ago, generated on version 3: lag 0
    stale = _put_group(prompt_step=2, oldest=[1, 2], newest=3)  # one trajectory started on version 1: lag 2
    refills: list[int] = []
    sampler = _sampler(lag, refills)
    stock = _sampler(lag, stock=True)

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


def test_fallback_to_the_submission_step_without_version_tags(clean_partition):
    uid = str(uuid.uuid4())
    tq.kv_batch_put(
        keys=[uid], partition_id="train", tags=[{"is_prompt": True, "status": "finished", "global_steps": 2}]
    )
    tq.kv_batch_put(keys=[f"{uid}_0_0"], partition_id="train", tags=[{"status": "success", "global_steps": 2}])
    sampler = _sampler(LagConfig(mode="bounded", max_lag=1, over_bound="drop"))
    sampler._sync_metadata_from_transfer_queue()
    assert sampler._stale_terminal_keys(3, "train") == set()  # oldest <= 1: lag (3-1) - 1 = 1
    assert sampler._stale_terminal_keys(4, "train") == {uid}  # lag 2


def test_wait_mode_takes_the_oldest_submission_even_when_later_ones_finished(clean_partition):
    sampler = _sampler(LagConfig(mode="bounded", max_lag=1))
    straggler = str(uuid.uuid4())
    tq.kv_batch_put(
        keys=[straggler], partition_id="train", tags=[{"is_prompt": True, "status": "running", "global_steps": 1}]
    )
    quick = [_put_group(prompt_step=2, oldest=[1]) for _ in range(3)]
    sampler._sync_metadata_from_transfer_queue()
    verl_pick = sampler._select_prompt_uids("train", sampler.finished_keys["train"], 2)[0]
    assert len(verl_pick) == 2 and set(verl_pick) <= set(quick)  # verl takes two quick groups now
    from sat_ext.lag.batches import next_batch

    assert next_batch(sampler._group_states("train"), 2) is None  # sat_ext waits for the straggler

    tq.kv_batch_put(
        keys=[f"{straggler}_0_0"],
        partition_id="train",
        tags=[{"status": "success", "global_steps": 1, "min_global_steps": 0, "max_global_steps": 1}],
    )
    tq.kv_put(key=straggler, partition_id="train", tag={"status": "finished"})
    batch, metrics = sampler.sample(global_steps=2, partition_id="train", batch_size=2)
    taken = {k.split("_")[0] for k in batch.keys}
    assert straggler in taken and len(taken) == 2 and metrics["lag/max"] == 1.0 and metrics["lag/dropped"] == 0.0


@pytest.fixture(scope="module")
def tiny_assets(tmp_path_factory):
    """The smoke run's tiny model, tokenizer and prompt files: what verl's _init_dataloader needs."""
    from sat_ext.smoke.assets import prompt_rows, write_data, write_model

    root = tmp_path_factory.mktemp("assets")
    write_model(root / "model")
    write_data(root / "train.parquet", prompt_rows(64))
    write_data(root / "val.parquet", prompt_rows(4, seed=1))
    return [
        f"actor_rollout_ref.model.path={root / 'model'}",
        f"data.train_files={root / 'train.parquet'}",
        f"data.val_files={root / 'val.parquet'}",
        "data.max_prompt_length=32",
        "data.dataloader_num_workers=0",
    ]


def _warmup_and_refill(lag: LagConfig, batch_size: int, assets: list[str], extra: list[str] = ()) -> tuple[list, int]:
    """verl's own trainer, tokenizer and dataloader set-up, then its ``on_train_begin`` (the warm-up) and one
    refill of a single evicted group, with the prompts they would dispatch counted instead of generated."""
    trainer = get_trainer_cls(TRAINER_MODE)(_compose(verl_overrides(lag, batch_size) + assets + list(extra)))
    trainer._init_tokenizer()
    trainer._init_dataloader()
    trainer.global_steps, trainer._restored_tq_prompt_count = 1, 0
    submitted = []
    trainer._submit_batch_to_rollout = lambda batch: submitted.append(len(batch)) or len(batch)
    trainer.on_train_begin()
    warmup = list(submitted)
    return warmup, trainer._add_prompts_to_generate(1)


@pytest.mark.parametrize(
    "lag",
    [LagConfig(mode="interval", interval=n, prefetch=1) for n in (1, 2, 8)]
    + [LagConfig(mode="bounded", max_lag=L) for L in (1, 4)],
    ids=str,
)
def test_verl_submits_the_prefetch_the_lag_block_asks_for_and_refills_one_group(transfer_queue, tiny_assets, lag):
    """The warm-up verl's own on_train_begin submits is lag.prefetch batches (interval) or max_lag batches
    (bounded) whatever data.gen_batch_size the user set: its async trainers force it to 1 in _init_dataloader,
    so a single failed or dropped group can be refilled (with gen_batch_size = train_batch_size, verl would
    submit no warm-up at all for n >= 2 and refuse a one-group refill)."""
    warmup, refilled = _warmup_and_refill(lag, 4, tiny_assets, ["data.gen_batch_size=32"])
    ahead = lag.prefetch if lag.mode == "interval" else lag.max_lag
    assert sum(warmup) == ahead * 4 and refilled == 1


@pytest.mark.parametrize("n,p,batch", [(11, 3, 5), (5, 7, 9), (3, 13, 9), (49, 1, 8)])
def test_verl_submits_the_whole_prefetch_where_p_over_n_rounds_down(transfer_queue, tiny_assets, n, p, batch):
    """The float p/n times n*B rounds to just under p*B for these settings (the last was refused before): verl's
    own _init_dataloader and on_train_begin, on the overrides' config, still submit exactly p batches ahead."""
    warmup, _ = _warmup_and_refill(LagConfig(mode="interval", interval=n, prefetch=p), batch, tiny_assets)
    assert sum(warmup) == p * batch


def test_wait_mode_evicts_a_group_over_the_bound_instead_of_refusing_the_batch(clean_partition):
    """bounded wait: a finished group over the bound at the head of the queue (a fault: admission should have
    prevented it) is evicted, refilled and counted, and the batch behind it is taken."""
    sampler = _sampler(LagConfig(mode="bounded", max_lag=1), refills := [])
    stale = _put_group(prompt_step=1, oldest=[1, 1])  # at global step 4 (version 3): lag 2 > 1
    fresh = {_put_group(prompt_step=3, oldest=[2, 3]) for _ in range(2)}
    batch, metrics = sampler.sample(global_steps=4, partition_id="train", batch_size=2)
    assert {k.split("_")[0] for k in batch.keys} == fresh and stale not in tq.kv_list("train").get("train", {})
    assert refills == [1] and metrics["lag/dropped"] == 2.0 and metrics["lag/max"] == 1.0


def _verl_warmup(lag: LagConfig, batch_size: int) -> int:
    """What verl's own ``_add_async_warmup_batches`` submits for the overrides of ``lag`` (gen_batch_size 1)."""
    from types import SimpleNamespace

    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    cfg, sent = _compose(verl_overrides(lag, batch_size)), []
    fake = SimpleNamespace(config=cfg, _restored_tq_prompt_count=0, _add_prompts_to_generate=sent.append)
    PPOTrainer._add_async_warmup_batches(fake, cfg.trainer.v1.separate_async.num_warmup_batches)
    return sum(sent)


def _run(lag: LagConfig, batch_size: int, global_steps: int, seed: int, fail_rate: float = 0.0, slots: int = 3):
    sampler = _sampler(lag, batch_size=batch_size)
    rollout = Rollout.remote(
        slots=slots, n=2, seed=seed, median_s=0.004, sigma=1.5, fail_rate=fail_rate, straggler_every=7
    )
    try:
        warmup = _verl_warmup(lag, batch_size)
        return drive(sampler, rollout, global_steps, lag.sync_every, batch_size, warmup, drain=lag.mode == "interval")
    finally:
        ray.get(rollout.close.remote())
        ray.kill(rollout)


@pytest.mark.parametrize(
    "lag",
    [LagConfig(mode="interval", interval=n, prefetch=1) for n in (1, 2)] + [LagConfig(mode="bounded", max_lag=1)],
    ids=str,
)
def test_with_generation_faster_than_training_the_trainer_never_waits_after_the_warm_up(clean_partition, lag):
    """Events, not seconds: with generation faster than training (each training step lasts until the rollout has
    nothing left to generate, so a loaded machine cannot turn it around), every step after the first takes its
    batches without one empty look (``lag/consumer_waits`` 0), and the rollout runs out of prompts (waiting for the
    next broadcast's) at most once per global step, i.e. once per ``interval`` optimizer steps. With the rollout
    slower than training (and the trainer not waiting for it) the counter does count."""
    batch = 3
    for median_s, fast, steps in ((0.002, True, 4), (0.2, False, 2)):
        sampler = _sampler(lag, batch_size=batch)
        rollout = Rollout.remote(slots=2 * batch * lag.sync_every, n=2, seed=3, median_s=median_s, sigma=0.1)
        try:
            warmup = _verl_warmup(lag, batch)
            res = drive(
                sampler,
                rollout,
                steps,
                lag.sync_every,
                batch,
                warmup,
                lag.mode == "interval",
                0.05,
                train_until_idle=fast,
            )
            idle = ray.get(rollout.idle_count.remote())
        finally:
            ray.get(rollout.close.remote())
            ray.kill(rollout)
            left = list((tq.kv_list("train") or {}).get("train", {}))
            if left:  # the next run starts on an empty partition
                tq.kv_clear(keys=left, partition_id="train")
        waits = [m["lag/consumer_waits"] for m in res.metrics]
        if fast:
            assert waits[1:] == [0.0] * (steps - 1), waits
            assert idle <= steps + 1, idle  # each global step's prompts, and the warm-up's
        else:
            assert sum(waits) > 0, waits


@pytest.mark.parametrize("interval,prefetch", [(1, 1), (4, 1), (4, 0)])
def test_interval_mode_is_batch_wise_under_long_tailed_finish_times(clean_partition, interval, prefetch):
    lag = LagConfig(mode="interval", interval=interval, prefetch=prefetch)
    res = _run(lag, batch_size=3, global_steps=4, seed=interval * 10 + prefetch, fail_rate=0.1)
    for c in res.consumed:
        trainer_step = (c.global_step - 1) * interval + c.local + 1
        version = batch_version(c.tags)  # one version generated the whole batch (no partial rollout)
        assert version == scheduled_version(trainer_step, interval, prefetch)
        assert len(c.tags) == 3 * 2  # B groups of rollout.n trajectories: nothing dropped
    # after the first window, the k-th batch generated by a broadcast is trained k steps later (k-1 without prefetch)
    lags = [((c.global_step - 1) * interval + c.local) - batch_version(c.tags) * interval for c in res.consumed]
    window = lags[interval:]
    assert sorted(set(window)) == list(range(prefetch, interval + prefetch)) or interval == 1 and window == [1] * 3
    assert all(m["lag/off_schedule"] == 0.0 and m["lag/dropped_total"] == 0.0 for m in res.metrics)
    # which groups form a batch is fixed at submission (dispatch order), not by which finished first
    assert res.fifo_violations() == 0
    # python -m sat_ext.check_run's lag check passes on these real metrics, and fails them against another interval
    records = [Record(t, m) for t, m in enumerate(res.metrics, 1)]
    assert check_lag_schedule(records, Expectation(sat=False, interval=interval, prefetch=prefetch)).passed
    wrong = Expectation(sat=False, interval=interval * 2, prefetch=prefetch)
    assert check_lag_schedule(records, wrong).passed is False


@pytest.mark.parametrize("over_bound", ["wait", "drop"])
def test_bounded_mode_never_trains_over_the_bound(clean_partition, over_bound):
    lag = LagConfig(mode="bounded", max_lag=1, over_bound=over_bound)
    res = _run(lag, batch_size=3, global_steps=12, seed=7, slots=6)  # rollout may run up to 2 batches ahead
    lags = [(c.global_step - 1) - t["min_global_steps"] for c in res.consumed for t in c.tags]
    assert max(lags) <= 1
    dropped = res.metrics[-1]["lag/dropped_total"]
    if over_bound == "wait":
        assert dropped == 0.0 and all(len(c.tags) == 3 * 2 for c in res.consumed)
        assert res.fifo_violations() == 0
    else:  # verl's order: what finished first; the stragglers cross the bound and are dropped, with their lengths
        # (whether that order also broke the dispatch order depends on the machine's timing: 0 on a loaded CI run)
        assert dropped > 0
        assert res.metrics[-1]["lag/dropped_total"] == sum(m["lag/dropped"] for m in res.metrics)


class _ActorWorkers:
    """The calls of sat_ext's KeptWeightsWorker that BroadcastWeights makes, on a model whose weights are the
    number of optimizer updates applied (the real worker's copies are tested in tests/verl/test_kept_weights.py,
    the live loop by the smoke run). ``alias=True`` keeps every save as the live weights, as verl's FSDP2 save does
    for parameters already on the CPU."""

    def __init__(self, alias: bool = False):
        self.weights, self.saved, self.alias, self.spill_dirs = 0, {}, alias, set()

    def save_model_to_cpu(self, key, spill_dir=None):
        self.saved[key] = None if self.alias else self.weights
        self.spill_dirs.add(spill_dir)

    def restore_model_from_cpu(self, key):
        if key not in self.saved:
            raise KeyError(key)
        if not self.alias:
            self.weights = self.saved[key]

    def clear_cpu_model(self, key):
        self.saved.pop(key, None)

    def weights_fingerprint(self):
        return [(float(self.weights), 0.0)]


def _batch(version: int):
    from transfer_queue import KVBatchMeta

    tags = [{"min_global_steps": version, "max_global_steps": version}] * 4
    tags.append({"min_global_steps": version, "max_global_steps": version + 1, "is_padding": True})
    return KVBatchMeta(partition_id="train", keys=list("abcde"), tags=tags)


@pytest.mark.parametrize("interval,prefetch", [(1, 1), (8, 1), (4, 0), (2, 3)])
def test_every_batch_gets_the_weights_of_the_broadcast_that_generated_it(transfer_queue, interval, prefetch):
    """The real trainer's denominator_weights (what its _compute_old_log_prob runs verl's recompute inside),
    with verl's own counters set as its fit loop sets them, over every batch of 7 global steps."""
    lag = LagConfig(mode="interval", interval=interval, prefetch=prefetch)
    trainer = get_trainer_cls(TRAINER_MODE)(_compose(verl_overrides(lag, train_batch_size=2)))
    workers = trainer.actor_rollout_wg = _ActorWorkers()
    for t in range(1, 8):  # verl global step t: the trainer holds broadcast t-1 = weights after (t-1)n updates
        trainer.global_steps = t
        assert workers.weights == (t - 1) * interval
        for local in range(interval):
            trainer.local_trigger_step = local
            version = scheduled_version((t - 1) * interval + local + 1, interval, prefetch)
            live, metrics = workers.weights, {}
            with trainer.denominator_weights(_batch(version), metrics):
                assert workers.weights == version * interval  # the denominator's weights
            assert workers.weights == live  # the live weights are back for the update
            restored = float(version * interval != live)
            assert metrics == {"lag/kept_weights_restored": restored, "lag/kept_weights_identical": 0.0}
            workers.weights += 1  # the optimizer step
        assert len(workers.saved) <= 1 + -(-prefetch // interval)  # kept_versions' copies, no leftover live copy


def test_kept_weights_that_alias_the_live_ones_are_reported(transfer_queue):
    """A save that aliases the parameters (verl's FSDP2 save of CPU-resident shards) makes every restore a no-op:
    the trainer reports it in lag/kept_weights_identical instead of training with r == 1 unnoticed."""
    lag = LagConfig(mode="interval", interval=1, prefetch=1)
    trainer = get_trainer_cls(TRAINER_MODE)(_compose(verl_overrides(lag, train_batch_size=2)))
    workers = trainer.actor_rollout_wg = _ActorWorkers(alias=True)
    trainer.local_trigger_step = 0
    seen = []
    for t in range(1, 4):  # batch t was generated by version t - 2 (t = 1: the warm-up batch, version 0)
        trainer.global_steps, metrics = t, {}
        with trainer.denominator_weights(_batch(max(0, t - 2)), metrics):
            pass
        seen.append((metrics["lag/kept_weights_restored"], metrics["lag/kept_weights_identical"]))
        workers.weights += 1
    assert seen == [(0.0, 0.0), (1.0, 1.0), (1.0, 1.0)]


def test_resume_regenerates_finished_untrained_groups_in_interval_mode(clean_partition):
    """verl's _reissue_inflight_prompts on a restored TransferQueue: with sat_ext's trainer, finished groups
    are re-generated with the pending ones, so the resumed step's groups all come from the current weights."""
    from tensordict import TensorDict

    lag = LagConfig(mode="interval", interval=2, prefetch=1)
    trainer = get_trainer_cls(TRAINER_MODE)(_compose(verl_overrides(lag, train_batch_size=2)))
    sent = []
    trainer.agent_loop_manager = type("Dispatch", (), {"generate_sequences": lambda self, b: sent.append(b)})()
    done, running = _put_group(prompt_step=3, oldest=[2, 2]), str(uuid.uuid4())
    for uid, status in ((done, "finished"), (running, "running")):
        fields = TensorDict({"prompt_id": torch.tensor([[1]])}, batch_size=[1])
        tq.kv_batch_put(
            keys=[uid],
            partition_id="train",
            fields=fields,
            tags=[{"is_prompt": True, "status": status, "global_steps": 3}],
        )
    trainer.global_steps = 4
    assert trainer._reissue_inflight_prompts() == 2
    assert len(sent) == 1 and len(sent[0]) == 2  # both groups dispatched again, with their stored prompt data
    items = tq.kv_list("train")["train"]
    assert {items[u]["status"] for u in (done, running)} == {"pending"} and items[done]["global_steps"] == 4
    assert not any(k.startswith(done + "_") for k in items)  # its version-2 trajectories were cleared


def test_the_kept_weights_folder_reaches_every_save_of_a_kept_version(transfer_queue):
    lag = LagConfig(mode="interval", interval=2, prefetch=1)
    cfg = _compose(verl_overrides(lag, train_batch_size=2, kept_weights_dir="/local/kept"))
    trainer = get_trainer_cls(TRAINER_MODE)(cfg)
    workers = trainer.actor_rollout_wg = _ActorWorkers()
    for t in (1, 2):
        trainer.global_steps = t
        for local in range(2):
            trainer.local_trigger_step = local
            with trainer.denominator_weights(_batch(scheduled_version((t - 1) * 2 + local + 1, 2, 1)), {}):
                pass
            workers.weights += 1
    assert workers.spill_dirs == {"/local/kept", None}  # kept versions spill; the short-lived live copy does not
