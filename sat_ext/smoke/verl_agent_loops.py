"""Agent loops that make verl's own loop meet a straggler and a failed rollout in the ``bounded1-drop`` smoke run.

Registered through verl's ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (a YAML list of
``name`` / ``_target_``, :func:`sat_ext.smoke.verl_variants.write_agent_loops`) and selected per prompt by the
data's ``agent_name`` column; every other prompt runs verl's ``single_turn_agent``.

- ``sat_ext_smoke_straggler``: generates its answer, then holds it back until the rollout serves weights two
  versions newer than the ones that generated it (it asks the rollout server for one token every
  :data:`POLL_S` seconds and reads the version it reports), so the group is over a bound of 1 when it finishes:
  a long answer, in effect.
- ``sat_ext_smoke_failure``: raises, as a rollout that crashed would; verl marks the group failed.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from .verl_variants import FAILURE, STRAGGLER

POLL_S = 1.0
TIMEOUT_S = 900.0
VERSIONS_BEHIND = 2


class StragglerAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn loop whose answer is returned only once the weights are two versions newer."""

    async def run(self, sampling_params: dict, **kwargs):
        output = await super().run(sampling_params, **kwargs)
        generated = output.extra_fields.get("min_global_steps")
        if generated is None:
            raise RuntimeError(f"{STRAGGLER}: the rollout reported no weight version (min_global_steps)")
        deadline = time.monotonic() + TIMEOUT_S
        probe_params = {**sampling_params, "max_tokens": 1, "logprobs": False}
        while time.monotonic() < deadline:
            probe = await self.server_manager.generate(
                request_id=uuid.uuid4().hex, prompt_ids=output.prompt_ids, sampling_params=probe_params
            )
            if (probe.extra_fields.get("global_steps") or 0) >= generated + VERSIONS_BEHIND:
                return output
            await asyncio.sleep(POLL_S)
        raise TimeoutError(f"{STRAGGLER}: the weights did not advance {VERSIONS_BEHIND} versions in {TIMEOUT_S} s")


class FailureAgentLoop(SingleTurnAgentLoop):
    """A rollout that fails."""

    async def run(self, sampling_params: dict, **kwargs):
        raise RuntimeError(f"{FAILURE}: a rollout failure forced by the smoke run")
