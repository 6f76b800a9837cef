"""The lag-aware subclasses of OpenRLHF's generator, trainer and PPOTrainerAsync actors, and :func:`install`."""

from __future__ import annotations

import functools
import itertools
from types import SimpleNamespace

from sat_ext.lag.accounting import batch_lags
from sat_ext.lag.metrics import LagMetrics
from sat_ext.lag.turns import TokenLagMetrics

from .. import _upstream
from .clock import LagClock
from .flags import lag_config
from .samples import _prompt_groups, _response_tokens, _span, _tag, _trajectory
from .timing import _Counted, _TimedLock, _TimedQueue

LAG_STATE_KEY = "sat_ext_lag"  # in OpenRLHF's checkpoint client states: LagMetrics.state_dict()


def install() -> None:
    """Make ``openrlhf.trainer.ppo_trainer_async.PPOTrainerAsync`` the lag-aware subclass (idempotent).

    OpenRLHF's ``train()`` imports that name when it runs, so call this before it does. Without ``--lag.*``
    flags the subclass is OpenRLHF's class unchanged.
    """
    from openrlhf.trainer import ppo_trainer_async

    ppo_trainer_async.PPOTrainerAsync = lag_ppo_trainer_async()


@functools.cache
def lag_actor_classes() -> SimpleNamespace:
    """Ray actor classes: ``generator`` and ``trainer`` (subclasses of OpenRLHF's ``GenerateSamplesActor`` and
    ``TrainingActor``) and ``clock`` (:class:`LagClock`). Built in the process that calls this."""
    import ray
    from openrlhf.trainer import ppo_trainer_async as pta
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    generator_base = pta.GenerateSamplesActor.__ray_actor_class__
    trainer_base = pta.TrainingActor.__ray_actor_class__

    class LagGenerateSamplesActor(generator_base):
        """OpenRLHF's generator with version tags, interval mode's schedule and idle-time accounting.

        Wraps (nothing copied): ``samples_generator._generate_vllm`` (tags every sample, training and eval,
        with the version read under the vLLM lock; feeds prompt groups sent back for regeneration in front of
        the dataloader), ``samples_generator.generate_samples`` (interval mode: releases the vLLM lock, waits
        for the batch's scheduled version, takes the lock again), ``fit`` (closes the clock when it ends), and
        the handles of the token pool and the vLLM lock (their waits count as producer idle time).
        """

        def __init__(self, *args, lag_clock, **kwargs):
            super().__init__(*args, **kwargs)
            self.lag_clock = lag_clock
            self.lag_cfg = lag_config(self.args)

            def idle(seconds):
                self.lag_clock.add_producer_idle.remote(seconds)

            self.rollout_slots = _TimedQueue(self.rollout_slots, idle)
            self.vllm_lock = _TimedLock(self.vllm_lock, idle)
            sg = self.samples_generator
            _upstream.wrap_generate_vllm(sg, self._lag_generate_vllm)
            if self.lag_cfg.mode == "interval":
                sg.generate_samples = self._lag_scheduled(sg.generate_samples)

        def _lag_generate_vllm(self, generate_vllm):
            sg = self.samples_generator

            @functools.wraps(generate_vllm)
            def wrapped(dataloader_iter, num_prompts, dynamic_filtering, **kwargs):
                requeued = None
                if dataloader_iter is _upstream.training_prompts(sg) and self.lag_cfg.over_bound == "regenerate":
                    items = ray.get(self.lag_clock.take_requeued.remote(num_prompts))
                    if items:
                        requeued = _Counted(items)
                        dataloader_iter = itertools.chain(requeued, dataloader_iter)
                oldest = ray.get(self.lag_clock.current_version.remote())
                experiences, prompts_consumed, exhausted = generate_vllm(
                    dataloader_iter, num_prompts, dynamic_filtering, **kwargs
                )
                newest = ray.get(self.lag_clock.current_version.remote()) if _upstream.partial_rollout(self) else None
                _tag(experiences, oldest, newest)
                if requeued is not None:  # regenerated prompts were counted when first drawn
                    prompts_consumed -= requeued.taken
                return experiences, prompts_consumed, exhausted

            return wrapped

        def _lag_scheduled(self, generate_samples):
            @functools.wraps(generate_samples)
            def wrapped(**kwargs):
                locked = not _upstream.partial_rollout(self)  # OpenRLHF's fit holds the vLLM lock around this call
                if locked:
                    ray.get(self.vllm_lock.release.remote())
                try:
                    step, _ = ray.get(self.lag_clock.claim.remote())
                finally:
                    if locked:
                        ray.get(self.vllm_lock.acquire.remote())
                try:
                    result = generate_samples(**kwargs)
                except BaseException:
                    ray.get(self.lag_clock.release.remote(step))
                    raise
                clock_call = self.lag_clock.done if result[0] else self.lag_clock.release
                ray.get(clock_call.remote(step))
                return result

            return wrapped

        def fit(self, *args, **kwargs):
            try:
                return super().fit(*args, **kwargs)
            finally:
                ray.get(self.lag_clock.close.remote())

    class _LagSync(BasePPOTrainer):
        """Between OpenRLHF's ``TrainingActor.broadcast_to_vllm`` (which holds the vLLM lock) and
        ``BasePPOTrainer.broadcast_to_vllm`` (the broadcast itself) in the MRO, so the new version is
        published inside the lock: no batch can be generated on the new weights under the old tag."""

        def broadcast_to_vllm(self):
            super().broadcast_to_vllm()
            version = getattr(self, "_lag_pending_version", None)
            if version is not None:
                ray.get(self.lag_clock.record_sync.remote(version))

    class LagTrainingActor(trainer_base, _LagSync):
        """OpenRLHF's trainer with the consumption check, per-step lag metrics and interval mode's broadcasts.

        Wraps (nothing copied): ``fit`` (starts the clock at the resumed step), ``train_step`` (lags of the
        consumed samples, the bound, the metrics added to the returned status, with the per-token ones where an
        agent reported its generated tokens: :func:`.samples._trajectory`), ``broadcast_to_vllm``
        (interval mode: skipped between syncs, and a sync waits for the batches scheduled on the current
        weights), and the handles of the rollout queue and the vLLM lock (their waits count as trainer idle
        time). The version is published by :class:`_LagSync`, inside OpenRLHF's lock.
        """

        def __init__(self, *args, lag_clock, **kwargs):
            super().__init__(*args, **kwargs)
            self.lag_clock = lag_clock
            self.lag_cfg = cfg = lag_config(self.args)
            self.lag_metrics = LagMetrics(cfg.hist_edges, interval_schedule=cfg.mode == "interval")
            self.token_lags = TokenLagMetrics(cfg.hist_edges)
            self._lag_in_step = False
            self._lag_pending_version = None
            self._lag_step = 0
            self._lag_synced = False
            self.rollout_queue = _TimedQueue(self.rollout_queue, self.lag_metrics.add_consumer_idle)
            self.vllm_lock = _TimedLock(self.vllm_lock, self.lag_metrics.add_consumer_idle)

        def fit(self, global_step: int = 0):
            ray.get(self.lag_clock.start.remote(global_step))
            return super().fit(global_step)

        def init_checkpoint_states(self):
            """OpenRLHF's resume states; the lag totals saved with them are restored (0 without a checkpoint)."""
            states = super().init_checkpoint_states()
            self.lag_metrics.load_state_dict(states.get(LAG_STATE_KEY, {}))
            return states

        def save_logs_and_checkpoints(self, global_step: int, logs_dict=None, client_states=None):
            """OpenRLHF's save, with the lag totals (``lag/dropped_total``, ...) in the checkpoint's client states."""
            client_states = {**(client_states or {}), LAG_STATE_KEY: self.lag_metrics.state_dict()}
            return super().save_logs_and_checkpoints(global_step, logs_dict, client_states)

        def _lag_consume(self, rollout_samples, version: int, steps_done: int) -> list:
            """The samples to train on: every sample's lag recorded; in bounded mode the prompt groups with a sample
            over the bound removed (:meth:`LagMetrics.record_over_bound`), those to regenerate sent back to the
            generator. With ``over_bound wait`` OpenRLHF's FIFO queue of at most L batches keeps lags in the bound."""
            cfg = self.lag_cfg
            lags = batch_lags(cfg, version, steps_done, [_span([s]) for s in rollout_samples])
            tokens = [_response_tokens(s) for s in rollout_samples]
            n = self.args.rollout.n_samples_per_prompt
            if any(lags.over):
                _prompt_groups(rollout_samples, n)  # raises unless whole groups
            keep, regenerate = self.lag_metrics.record_over_bound(cfg.over_bound, lags.over, tokens, n)
            if regenerate:
                firsts = [rollout_samples[start] for start in regenerate]
                requeue = [(None, s.prompts[:1], s.labels[:1], s.images[:1] or [None]) for s in firsts]
                ray.get(self.lag_clock.requeue.remote(requeue))
            self.lag_metrics.record_batch(lags, tokens, keep)
            kept = [sample for sample, stays in zip(rollout_samples, keep, strict=True) if stays]
            self.token_lags.record_batch(version, [_trajectory(sample) for sample in kept])
            return kept

        def train_step(self, rollout_samples, global_step: int):
            cfg = self.lag_cfg
            k = cfg.sync_every
            version = global_step // k  # weight syncs after steps k, 2k, ... <= global_step
            step = global_step + 1
            kept = self._lag_consume(rollout_samples, version, global_step)
            self._lag_step, self._lag_synced = step, False
            if kept:
                self._lag_in_step = True
                try:
                    status, new_step = super().train_step(kept, global_step)
                finally:
                    self._lag_in_step = False
            else:  # every group was over the bound: nothing to train on, no broadcast, the step does not count
                status, new_step = {}, global_step
            self.lag_metrics.add_producer_idle(ray.get(self.lag_clock.pop_producer_idle.remote()))
            new_version = version + 1 if self._lag_synced else version
            status.update(self.lag_metrics.flush(new_version, new_step))
            status.update(self.token_lags.flush())  # agent samples only (lag.samples._trajectory)
            status["lag/broadcast"] = float(self._lag_synced)
            return status, new_step

        def broadcast_to_vllm(self):
            if not self._lag_in_step:  # OpenRLHF's broadcast of restored weights on resume: not a new version
                return super().broadcast_to_vllm()
            cfg = self.lag_cfg
            step = self._lag_step
            if step % cfg.sync_every:
                return  # interval mode: no weight sync after this step
            if cfg.mode == "interval":
                self.lag_metrics.add_consumer_idle(ray.get(self.lag_clock.wait_sync_allowed.remote()))
            self._lag_pending_version = step // cfg.sync_every
            try:
                super().broadcast_to_vllm()
            finally:
                self._lag_pending_version = None
            self._lag_synced = True

    return SimpleNamespace(
        generator=ray.remote(LagGenerateSamplesActor),  # OpenRLHF's own decorations: plain @ray.remote
        trainer=ray.remote(LagTrainingActor),
        clock=ray.remote(num_cpus=0)(LagClock),
    )


class _WithKwargs:
    """An actor class whose ``.remote(...)`` also passes ``extra`` keyword arguments."""

    def __init__(self, actor_cls, **extra):
        self.actor_cls, self.extra = actor_cls, extra

    def remote(self, *args, **kwargs):
        return self.actor_cls.remote(*args, **kwargs, **self.extra)


@functools.cache
def lag_ppo_trainer_async():
    """OpenRLHF's ``PPOTrainerAsync`` Ray actor class, with the lag modes when ``--lag.*`` flags are set."""
    import ray
    from openrlhf.trainer import ppo_trainer_async as pta

    _upstream.check()  # every private OpenRLHF member the lag actors use, before any is used
    base = pta.PPOTrainerAsync.__ray_actor_class__
    if getattr(base, "_sat_ext_lag", False):  # already installed
        return pta.PPOTrainerAsync

    class LagPPOTrainerAsync(base):
        """``__init__`` wraps OpenRLHF's: it creates the run's :class:`LagClock` and binds the two actor names
        OpenRLHF's ``__init__`` resolves (``GenerateSamplesActor``, ``TrainingActor``, through that function's
        globals, whether Ray shipped the class by reference or by value) to the lag subclasses, which get
        the clock as an extra keyword argument. Without ``--lag.*`` flags it is OpenRLHF's ``__init__``."""

        _sat_ext_lag = True

        def __init__(self, pretrain, strategy, *args, **kwargs):
            cfg = lag_config(strategy.args)
            if cfg is None:
                super().__init__(pretrain, strategy, *args, **kwargs)
                return
            classes = lag_actor_classes()
            self.lag_clock = classes.clock.remote(cfg.mode, cfg.sync_every, cfg.prefetch)
            lag_classes = {
                "GenerateSamplesActor": _WithKwargs(classes.generator, lag_clock=self.lag_clock),
                "TrainingActor": _WithKwargs(classes.trainer, lag_clock=self.lag_clock),
            }
            with _upstream.actor_classes_bound(base.__init__, lag_classes):
                super().__init__(pretrain, strategy, *args, **kwargs)

    return ray.remote(LagPPOTrainerAsync)
