"""Per-turn weight versions of verl agent episodes, recorded on the rollout side and read on the trainer side, and
the trainer's check that tool observations are masked out of the loss.

Rollout side: :class:`TurnRecorder` wraps an agent loop's ``server_manager`` (verl's LLM client) and records, per
``generate`` call (one assistant turn, however many abort/resume segments verl's client ran it in), the tokens
generated and the ``min_global_steps`` / ``max_global_steps`` the rollout server reported. An agent loop puts
:meth:`TurnRecorder.record` under ``extra_fields["sat_ext_turns"]`` (:data:`sat_ext.lag.turns.TURNS_KEY`), which
verl stores with the trajectory in TransferQueue. verl's own tags keep only the episode's oldest and newest
version (``tool_agent_loop.py`` ``_handle_generating_state``; docs/research/agent-loops.md §3).

Trainer side: :func:`read_batch` reads each trajectory of a batch back (turn record, loss tokens, version tags)
for :class:`sat_ext.lag.turns.TokenLagMetrics`, and :func:`check_observation_masks` refuses a multi-turn
trajectory whose ``response_mask`` has no 0 between its generated tokens: an agent loop that leaves its tool
observations in the loss (they would enter SAT's quantile, Eq. 14, and the gradient).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sat_ext.lag.turns import TURNS_KEY, Trajectory, Turn, parse_turns, trim_turns
from sat_ext.lag.versions import VersionSpan

DEFAULT_LOOP_KEY = "actor_rollout_ref.rollout.agent.default_agent_loop"
LOOPS_KEY = "actor_rollout_ref.rollout.agent.agent_loop_config_path"


class TurnRecorder:
    """verl's LLM client with each ``generate`` call recorded as one :class:`~sat_ext.lag.turns.Turn` (and its
    prompt length); ``max_tokens`` (optional) caps every call's new tokens. Everything else is the client's."""

    def __init__(self, client: Any, max_tokens: int | None = None):
        self.client = client
        self.max_tokens = max_tokens
        self.turns: list[Turn] = []
        self.prompt_ids: list[list[int]] = []  # the prompt of each call, as the model saw it

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: Any):
        """The client's ``generate``, recorded (``sampling_params`` is not changed in place)."""
        if self.max_tokens is not None:
            sampling_params = {**sampling_params, "max_tokens": self.max_tokens}
        output = await self.client.generate(
            request_id=request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs
        )
        fields = output.extra_fields
        oldest, newest = fields.get("min_global_steps"), fields.get("max_global_steps")
        if oldest is None or newest is None:
            raise RuntimeError(
                f"sat_ext's turn record: the rollout reported no weight version for a turn (extra_fields {fields!r})"
            )
        self.turns.append(Turn(len(output.token_ids), VersionSpan(int(oldest), int(newest))))
        self.prompt_ids.append(list(prompt_ids))
        return output

    def record(self, response_mask: Sequence[int]) -> list[list[int]]:
        """The turn record of the episode whose final ``response_mask`` this is: the turns as far as they
        survived the cut to ``response_length`` (its ones are the generated tokens kept, in order)."""
        return [t.as_list() for t in trim_turns(self.turns, int(sum(response_mask)))]


class ObservationMaskError(ValueError):
    """A multi-turn trajectory whose tool observations are in the loss."""


def _masks(value: Any) -> list[list[int]]:
    rows = value.unbind() if getattr(value, "is_nested", False) else list(value)
    return [[int(x) for x in row.reshape(-1).tolist()] for row in rows]


def _inner_zero(mask: Sequence[int]) -> bool:
    ones = [i for i, m in enumerate(mask) if m]
    return bool(ones) and any(not m for m in mask[ones[0] : ones[-1] + 1])


def check_observation_masks(
    keys: Sequence[str], num_turns: Sequence[int], masks: Sequence[Sequence[int]], loops: str
) -> None:
    """Raise :class:`ObservationMaskError` for the first trajectory with more than one turn pair (verl's
    ``num_turns`` > 2: assistant turns + tool / user turns + 1) whose ``response_mask`` has no 0 between its
    first and last 1. verl's tool agent loop gives every observation token mask 0 (``continuous_token.py``
    ``align_response_metadata``), so only an agent loop that leaves observations in the loss fails; ``loops``
    names the run's agent loops."""
    for key, turns, mask in zip(keys, num_turns, masks, strict=True):
        if int(turns) > 2 and not _inner_zero(mask):
            raise ObservationMaskError(
                f"trajectory {key} has num_turns={int(turns)} but its response_mask has no 0 between its generated "
                f"tokens: the agent loop put its tool observations in the loss, where they would move SAT's "
                f"quantile (Eq. 14) and get gradient. The run's agent loops: {loops}. An agent loop must give "
                f"observation tokens response_mask 0 and log-prob 0.0, as verl's ToolAgentLoop does"
            )


def loops_named(config: Any) -> str:
    """The run's agent loops as a message names them: the default and where custom ones are registered."""
    from omegaconf import OmegaConf

    default = OmegaConf.select(config, DEFAULT_LOOP_KEY)
    custom = OmegaConf.select(config, LOOPS_KEY)
    return (
        f"{DEFAULT_LOOP_KEY}={default}"
        + (f", custom loops in {LOOPS_KEY}={custom}" if custom else "")
        + (" (or the data's agent_name column)")
    )


def read_batch(batch: Any, loops: str) -> list[Trajectory] | None:
    """The trajectories of ``batch`` (verl's ``KVBatchMeta``, padding left out) as the turn metrics see them,
    read from TransferQueue; None when none is multi-turn or recorded (single-turn runs read no mask).
    Raises :class:`ObservationMaskError` (:func:`check_observation_masks`) first."""
    import transfer_queue as tq

    rows = [(k, t) for k, t in zip(batch.keys, batch.tags, strict=True) if not t.get("is_padding", False)]
    if not rows:
        return None
    keys = [k for k, _ in rows]
    data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["extra_fields", "num_turns"])
    extras, num_turns = data.get("extra_fields").tolist(), [int(n) for n in data.get("num_turns").tolist()]
    records = [(e or {}).get(TURNS_KEY) if isinstance(e, dict) else None for e in extras]
    if all(r is None for r in records) and all(n <= 2 for n in num_turns):
        return None
    masks = _masks(
        tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["response_mask"])["response_mask"]
    )
    check_observation_masks(keys, num_turns, masks, loops)
    out = []
    for (key, tag), record, mask in zip(rows, records, masks, strict=True):
        oldest, newest = tag.get("min_global_steps"), tag.get("max_global_steps")
        span = None if oldest is None else VersionSpan(int(oldest), max(int(oldest), int(newest or oldest)))
        turns = None if record is None else parse_turns(record, f"trajectory {key} extra_fields[{TURNS_KEY!r}]")
        out.append(Trajectory(turns, sum(mask), span))
    return out
