"""verl 0.9.1 V1 replay buffer with sat_ext's lag rules, plugged in with ``trainer.v1.sampler.custom_sampler``.

Selected by :func:`.overrides.verl_overrides`; its settings arrive as ``trainer.v1.sampler.sampler_kwargs`` (the fields
of :class:`~sat_ext.lag.config.LagConfig`, plus ``filter_groups_metric``, which the launcher forwards from
``algorithm.filter_groups``). They were checked once, in the driver, by :func:`.prepared.prepare_verl_config`, and are
read here as data; a config that the launcher did not prepare is refused (:func:`.prepared.prepared_lag`).

At verl global step t the trainer trains on weights version t - 1 (one broadcast per global step). A
trajectory's oldest version is its ``min_global_steps`` tag, or, when the engine did not report one,
``prompt global_steps - 1`` (the weights at submission, never newer than the real oldest).

Which groups a local update takes (:mod:`sat_ext.lag.batches`):

- interval mode and bounded ``wait``: the first ``batch_size`` groups in submission order (step, then the order the
  trainer dispatched them in, :meth:`SATLagReplayBuffer.note_dispatched`), once all of them have finished, so a
  batch's lag never depends on its response lengths; failed (and, in bounded mode, DAPO-filtered) groups are
  evicted and refilled as verl does;
- bounded ``drop``: verl's own order (oldest finished groups first), and a group with any trajectory over
  ``lag.max_lag`` is evicted, refilled, and counted with its response lengths. In bounded ``wait`` no group can be
  over the bound (verl's prefetch window is the admission control); one that is anyway is evicted and counted the
  same way, so it can never stop the queue.

Metrics (:class:`sat_ext.lag.LagMetrics`, counted per trajectory, without ``lag/producer_idle_s``) are
returned by the last ``sample`` call of each global step.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from omegaconf import DictConfig
from transfer_queue import KVBatchMeta
from verl.utils.skip import SkipManager

from sat_ext.lag.accounting import batch_lags, check_within_bound
from sat_ext.lag.batches import GroupState, next_batch, over_bound, waits_for_stragglers
from sat_ext.lag.metrics import LagMetrics
from sat_ext.lag.versions import VersionSpan, sample_lag

from .._upstream import ReplayBufferSeam, accumulate_eviction_metrics
from .overrides import TRAINER_MODE
from .prepared import LAUNCHER, UnpreparedConfigError, prepared_lag

POLL_INTERVAL_S = 0.05
"""How long the sampler sleeps between two looks at TransferQueue for its batch. verl's replay buffer sleeps 2.0 s
(``ReplayBufferAsync.__init__``'s default, which its trainer never overrides): a batch that finished 0.1 s after a
look cost the trainer 2 s (docs/lag.md, "What lag buys"). Each look is one metadata read from TransferQueue."""


class SATLagReplayBuffer(ReplayBufferSeam):
    """``ReplayBufferAsync`` that takes batches by :mod:`sat_ext.lag.batches`' rules and records lags."""

    def __init__(
        self,
        trainer_mode: str,
        trainer_config: DictConfig,
        max_off_policy_threshold: int | None,
        max_off_policy_strategy: str,
        sampler_kwargs: DictConfig,
        **kwargs,
    ):
        if trainer_mode != TRAINER_MODE:
            raise UnpreparedConfigError(
                f"trainer.v1.trainer_mode={trainer_mode}: sat_ext's lag sampler runs only under "
                f"trainer.v1.trainer_mode={TRAINER_MODE} (verl's {trainer_mode} does not keep the lag schedule); set "
                f"it and launch with `python -m {LAUNCHER}` (sat_ext.verl.lag.overrides.verl_overrides sets both)"
            )
        self.lag, filter_metric = prepared_lag(sampler_kwargs)
        kwargs.setdefault("poll_interval", POLL_INTERVAL_S)
        super().__init__(
            trainer_mode=trainer_mode,
            trainer_config=trainer_config,
            max_off_policy_threshold=max_off_policy_threshold,
            max_off_policy_strategy=max_off_policy_strategy,
            sampler_kwargs=sampler_kwargs,
            filter_groups_metric=filter_metric,
            **kwargs,
        )
        self.sync_every = int(trainer_config.get("parameter_sync_step", 1))  # verl's own reading of the block
        self.lag_metrics = LagMetrics(
            self.lag.hist_edges,
            interval_schedule=self.lag.mode == "interval",
            track_producer_idle=False,
            track_consumer_waits=True,
        )
        self._local_step = (None, 0)  # (global_steps, sample calls made at it)
        self._dispatched: dict[str, int] = {}  # uid -> the order the trainer dispatched it in (note_dispatched)
        self._next_position = 0

    # ------------------------------------------------------------------ groups as the lag rules see them

    def _trajectory_span(self, partition_id: str, key: str, tag: dict) -> VersionSpan:
        oldest, newest = tag.get("min_global_steps"), tag.get("max_global_steps")
        if oldest is None:
            uid = key.split("_")[0]
            oldest = max(0, self.prompt_global_steps[partition_id].get(uid, tag.get("global_steps", 1)) - 1)
        oldest = int(oldest)
        return VersionSpan(oldest, max(oldest, int(newest if newest is not None else oldest)))

    def _trajectories(self, partition_id: str, uids: set[str]) -> dict[str, list[tuple[VersionSpan, int]]]:
        """(version span, response length) of each trajectory of the groups in ``uids``."""
        out: dict[str, list[tuple[VersionSpan, int]]] = defaultdict(list)
        for key, tag in self.partitions[partition_id].items():
            uid = key.split("_")[0]
            if uid in uids:
                out[uid].append((self._trajectory_span(partition_id, key, tag), int(tag.get("response_len", 0))))
        return out

    def note_dispatched(self, uids: list[str]) -> None:
        """The trainer dispatched these prompts to the rollout, in this order (the FIFO order's tie-break within a
        submission step; a prompt not noted, e.g. one re-issued on resume, sorts after the noted ones)."""
        start, self._next_position = self._next_position, self._next_position + len(uids)
        self._dispatched.update((uid, start + i) for i, uid in enumerate(uids))

    def _group_states(self, partition_id: str) -> list[GroupState]:
        """Every group of the partition that is pending, running or finished: submission step, finished or not,
        dispatch order (the prompts no longer in the partition are forgotten)."""
        finished = self.finished_keys[partition_id]
        live = self.pending_keys[partition_id] | self.running_keys[partition_id] | finished
        if len(self._dispatched) > 2 * len(live) + 1024:
            self._dispatched = {uid: pos for uid, pos in self._dispatched.items() if uid in live}
        steps, order, last = self.prompt_global_steps[partition_id], self._dispatched, self._next_position
        return [GroupState(uid, int(steps.get(uid, 0)), uid in finished, order.get(uid, last)) for uid in live]

    # ------------------------------------------------------------------ verl hooks

    def wait_for_next_poll(self, partition_id: str, last_debug: float) -> float:
        """Every look that found no batch (or, in drop mode, too few sampleable groups) is counted
        (``lag/consumer_waits``) before verl's sleep."""
        self.lag_metrics.add_consumer_wait()
        return super().wait_for_next_poll(partition_id, last_debug)

    def stale_terminal_keys(self, global_steps: int, partition_id: str) -> set[str]:
        """Bounded mode: finished groups with a trajectory over ``lag.max_lag`` (evicted, counted and refilled).
        With ``over_bound=wait`` admission keeps every lag within the bound; a group over it is a fault, evicted
        and counted under ``lag/dropped`` rather than refused at the head of the queue."""
        if partition_id == "val" or self.lag.mode != "bounded":
            return set()
        trajectories = self._trajectories(partition_id, set(self.finished_keys[partition_id]))
        return {
            uid
            for uid, group in trajectories.items()
            if any(over_bound(self.lag, sample_lag(global_steps - 1, span)) for span, _ in group)
        }

    def evict_terminal_groups(
        self,
        global_steps: int,
        partition_id: str,
        eviction_reasons: tuple[set[str], set[str], set[str], Counter],
    ) -> tuple[set[str], int, int, dict]:
        stale_uids = eviction_reasons[0]
        if stale_uids:
            group = [t for ts in self._trajectories(partition_id, stale_uids).values() for t in ts]
            self.lag_metrics.record_dropped(len(group), sum(length for _, length in group))
        return super().evict_terminal_groups(global_steps, partition_id, eviction_reasons)

    def _evict_and_refill(self, global_steps: int, partition_id: str, metrics: dict) -> bool:
        """One poll on fresh metadata: verl's eviction of failed / DAPO-filtered groups and its refill.

        Returns whether nothing was evicted (else poll again: the refill changed the partition).
        """
        self.sync_metadata()
        reasons = self.terminal_eviction_reasons(global_steps, partition_id)
        evicted, stale_count, _, new_metrics = self.evict_terminal_groups(global_steps, partition_id, reasons)
        if evicted:
            accumulate_eviction_metrics(metrics, new_metrics, stale_count)
            if self.refill_fn is not None:
                self.refill_fn(len(evicted))
        return not evicted

    def _wait_for_fifo_batch(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[list[str], dict]:
        """Poll until :func:`sat_ext.lag.batches.next_batch` releases a batch; evict and refill meanwhile."""
        metrics: dict = {}
        last_debug = time.time()
        while True:
            if self._evict_and_refill(global_steps, partition_id, metrics):
                chosen = next_batch(self._group_states(partition_id), batch_size)
                if chosen is not None:
                    return [g.uid for g in chosen], metrics
            last_debug = self.wait_for_next_poll(partition_id, last_debug)

    def drain(self, global_steps: int, partition_id: str = "train") -> dict:
        """Block until no prompt is pending or running (failed ones evicted and refilled meanwhile).

        Called by :class:`sat_ext.verl.lag.trainer.SATSeparateAsyncTrainer` before each broadcast in interval
        mode, so the prefetched batches are generated entirely by the weights being replaced.
        """
        metrics: dict = {}
        last_debug = time.time()
        while True:
            clean = self._evict_and_refill(global_steps, partition_id, metrics)
            if clean and not (self.pending_keys[partition_id] or self.running_keys[partition_id]):
                return metrics
            last_debug = super().wait_for_next_poll(partition_id, last_debug)  # timed (lag_drain), not counted

    @SkipManager.annotate_tq(role="rollout_tq", phase="sample")
    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        """Take one local update's batch by the lag rules; adds ``lag/*`` metrics once per global step."""
        if partition_id == "val":
            return super().sample(global_steps, partition_id, batch_size)
        start = time.perf_counter()
        if waits_for_stragglers(self.lag):
            selected, metrics = self._wait_for_fifo_batch(global_steps, partition_id, batch_size)
            snapshot = dict(self.partitions[partition_id])
        else:
            sampleable, metrics = self.wait_for_sampleable(global_steps, partition_id, batch_size)
            selected, snapshot, _ = self.select_prompt_uids(partition_id, sampleable, batch_size)
        self.lag_metrics.add_consumer_idle(time.perf_counter() - start)

        last_step, calls = self._local_step
        local = calls if last_step == global_steps else 0
        self._local_step = (global_steps, local + 1)
        steps_done = (global_steps - 1) * self.sync_every + local
        trajectories = [t for group in self._trajectories(partition_id, set(selected)).values() for t in group]
        lags = batch_lags(self.lag, global_steps - 1, steps_done, [span for span, _ in trajectories])
        check_within_bound(self.lag, lags, "the verl sampler")
        self.lag_metrics.record_batch(lags, [length for _, length in trajectories])

        batch = self.materialize_batch(partition_id, selected, snapshot)
        if local == self.sync_every - 1:
            metrics = dict(metrics)
            metrics.update(self.lag_metrics.flush(global_steps - 1, steps_done + 1))
        return batch, metrics
