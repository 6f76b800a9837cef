"""Every private verl 0.9.1 member sat_ext's lag modes use, in one place, checked at import against the pin.

The rest of the package reaches verl's private API only through this module: :class:`ReplayBufferSeam` and
:class:`TrainerSeam` are verl's ``ReplayBufferAsync`` and ``PPOTrainerSeparateAsync`` with the private members
sat_ext calls under public names, and the private hooks verl calls forwarded to public methods a subclass
overrides. :data:`PRIVATE` lists each (module, qualified name, what sat_ext does with it); :func:`check` raises
naming the first one the installed verl lacks (a verl bump must fail here, not halfway through a run) and
:func:`names` is what ``sat-ext doctor`` lists. The CPU setup's patches have their own list in
:mod:`sat_ext.verl.cpu.upstream`, built the same way. Where verl gains a public hook, a patch under patches/ is
the long-term route (docs/verl.md).
"""

from __future__ import annotations

from verl.trainer.ppo.v1 import replay_buffer as _replay_buffer
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync

from sat_ext.pinned import VERL_PINS, Private, check_private

_RB = "verl.trainer.ppo.v1.replay_buffer"
_TB = "verl.trainer.ppo.v1.trainer_base"
_TSA = "verl.trainer.ppo.v1.trainer_separate_async"
_TAL = "verl.experimental.agent_loop.tool_agent_loop"
_LLM = "verl.workers.rollout.llm_server"


PRIVATE = (
    Private(_RB, "_accumulate_eviction_metrics", "adds the evictions of a poll to the step's metrics"),
    Private(_RB, "ReplayBufferAsync._sync_metadata_from_transfer_queue", "called: fresh metadata before a poll"),
    Private(_RB, "ReplayBufferAsync._terminal_eviction_reasons", "called: failed / filtered / stale groups"),
    Private(_RB, "ReplayBufferAsync._evict_terminal_groups", "overridden: counts the stale groups it drops"),
    Private(_RB, "ReplayBufferAsync._stale_terminal_keys", "overridden: the lag bound decides staleness"),
    Private(_RB, "ReplayBufferAsync._wait_for_next_poll", "overridden: counts the looks that found no batch"),
    Private(_RB, "ReplayBufferAsync._select_prompt_uids", "called: verl's own order (bounded drop)"),
    Private(_RB, "ReplayBufferAsync._materialize_batch", "called: the chosen groups as a batch"),
    Private(_TB, "PPOTrainer._compute_old_log_prob", "called past separate_async's override (on the kept weights)"),
    Private(_TB, "PPOTrainer._reissue_inflight_prompts", "overridden: interval mode re-generates finished groups"),
    Private(_TB, "PPOTrainer._submit_batch_to_rollout", "overridden: the sampler notes the dispatch order"),
    Private(_TB, "PPOTrainer._save_checkpoint", "overridden: the lag totals saved beside the checkpoint"),
    Private(_TB, "PPOTrainer._load_checkpoint", "overridden: the lag totals restored on resume"),
    Private(_TSA, "PPOTrainerSeparateAsync._init_resource_pool_mgr", "overridden: the kept-weights actor worker"),
    Private(_TB, "PPOTrainer._consume_sync_metrics:_pending_sync_metrics", "written: drain metrics for the step"),
    Private(_TSA, "PPOTrainerSeparateAsync.get_llm_client:standalone_server_manager", "read: the rollout's client"),
    Private(_LLM, "FullyAsyncLLMServerClient.generate:asyncio", "its 1 s sleep backs off (sat_ext.verl.lag.resubmit)"),
    # relied on, not overridden: the smoke's calculator loop (sat_ext.smoke.verl_calc.CalcToolAgentLoop) replaces
    # attributes verl's tool agent loop reads per turn
    Private(_TAL, "ToolAgentLoop._handle_generating_state:tool_parser", "read per turn: the calculator call parser"),
    Private(_TAL, "ToolAgentLoop._handle_generating_state:server_manager", "called per turn: the turn recorder"),
    Private(_TAL, "ToolAgentLoop.__init__:tools", "set by verl: the loop checks its calculator is configured"),
)


def check() -> list[str]:
    """Check the installed verl version and every entry of :data:`PRIVATE`; returns their names."""
    return check_private(VERL_PINS, PRIVATE, "sat_ext's verl lag modes", "sat_ext/verl/_upstream.py")


def names() -> list[str]:
    """``module.name`` of every private verl member sat_ext uses."""
    return [f"{e.module}.{e.name}" for e in PRIVATE]


check()

accumulate_eviction_metrics = _replay_buffer._accumulate_eviction_metrics


class ReplayBufferSeam(ReplayBufferAsync):
    """verl's ``ReplayBufferAsync`` with its private members under public names (see :data:`PRIVATE`)."""

    # verl calls these private hooks; a subclass overrides the public ones
    def _stale_terminal_keys(self, global_steps: int, partition_id: str) -> set[str]:
        return self.stale_terminal_keys(global_steps, partition_id)

    def _evict_terminal_groups(self, global_steps, partition_id, eviction_reasons):
        return self.evict_terminal_groups(global_steps, partition_id, eviction_reasons)

    def _wait_for_next_poll(self, partition_id: str, last_debug: float) -> float:
        return self.wait_for_next_poll(partition_id, last_debug)

    def stale_terminal_keys(self, global_steps: int, partition_id: str) -> set[str]:
        """verl's staleness rule (``max_off_policy_threshold``)."""
        return ReplayBufferAsync._stale_terminal_keys(self, global_steps, partition_id)

    def evict_terminal_groups(self, global_steps, partition_id, eviction_reasons):
        """verl's eviction of the groups in ``eviction_reasons``: (evicted, stale count, ..., metrics)."""
        return ReplayBufferAsync._evict_terminal_groups(self, global_steps, partition_id, eviction_reasons)

    # verl's private members sat_ext calls
    def sync_metadata(self) -> None:
        self._sync_metadata_from_transfer_queue()

    def terminal_eviction_reasons(self, global_steps: int, partition_id: str):
        return self._terminal_eviction_reasons(global_steps, partition_id)

    def wait_for_next_poll(self, partition_id: str, last_debug: float) -> float:
        """verl's sleep of ``poll_interval`` seconds between two looks at the partition (and its debug log)."""
        return ReplayBufferAsync._wait_for_next_poll(self, partition_id, last_debug)

    def select_prompt_uids(self, partition_id: str, sampleable, batch_size: int):
        return self._select_prompt_uids(partition_id, sampleable, batch_size)

    def materialize_batch(self, partition_id: str, selected, snapshot):
        return self._materialize_batch(partition_id, selected, snapshot)


class TrainerSeam(PPOTrainerSeparateAsync):
    """verl's ``PPOTrainerSeparateAsync`` with its private hooks forwarded to public methods (see :data:`PRIVATE`)."""

    def _reissue_inflight_prompts(self, partition_id: str = "train") -> int:
        return self.reissue_inflight_prompts(partition_id)

    def _submit_batch_to_rollout(self, batch) -> int:
        return self.submit_batch_to_rollout(batch)

    def _init_resource_pool_mgr(self):
        return self.init_resource_pool_mgr()

    def _save_checkpoint(self):
        return self.save_checkpoint()

    def _load_checkpoint(self):
        return self.load_checkpoint()

    def _compute_old_log_prob(self, batch, metrics: dict):
        return self.compute_old_log_prob(batch, metrics)

    def reissue_inflight_prompts(self, partition_id: str = "train") -> int:
        return PPOTrainerSeparateAsync._reissue_inflight_prompts(self, partition_id)

    def submit_batch_to_rollout(self, batch) -> int:
        """verl's registration of ``batch``'s prompts in TransferQueue and their dispatch to the rollout."""
        return PPOTrainerSeparateAsync._submit_batch_to_rollout(self, batch)

    def init_resource_pool_mgr(self):
        return PPOTrainerSeparateAsync._init_resource_pool_mgr(self)

    def save_checkpoint(self):
        return PPOTrainerSeparateAsync._save_checkpoint(self)

    def load_checkpoint(self):
        return PPOTrainerSeparateAsync._load_checkpoint(self)

    def compute_old_log_prob(self, batch, metrics: dict):
        return PPOTrainerSeparateAsync._compute_old_log_prob(self, batch, metrics)

    def base_compute_old_log_prob(self, batch, metrics: dict):
        """verl's base ``_compute_old_log_prob`` (on the current weights), past separate_async's override."""
        return PPOTrainer._compute_old_log_prob(self, batch, metrics)

    def add_pending_sync_metrics(self, metrics: dict) -> None:
        """Metrics logged with the step whose broadcast is pending."""
        self._pending_sync_metrics.update(metrics)
