"""Lag control for asynchronous RL rollout (SPEC §2), framework-free.

- :mod:`.config`: the validated ``lag:`` block and ``check_compatible`` for engine settings.
- :mod:`.versions`: policy versions, per-sample version spans, lag.
- :mod:`.schedule`: admission rules for bounded and interval mode.
- :mod:`.metrics`: the per-step flat metrics dict.
- :mod:`.controller`: the controller (claims with leases, consumption check, version counter).
- :mod:`.state`: saving / loading the controller state with a checkpoint.
- :mod:`.ray_actors` (imports ray): the shared controller actor.
- :mod:`.verl_overrides` / :mod:`.verl_sampler` (the latter imports verl): the verl integration.
"""

from .config import EngineSettings, LagConfig, LagConfigError, check_compatible
from .controller import Claim, ConsumedSample, LagController, LagProtocolError
from .metrics import LagMetrics
from .state import load_state, save_state
from .versions import VersionSpan, lag_in_steps, sample_lag

__all__ = [
    "Claim",
    "ConsumedSample",
    "EngineSettings",
    "LagConfig",
    "LagConfigError",
    "LagController",
    "LagMetrics",
    "LagProtocolError",
    "VersionSpan",
    "check_compatible",
    "lag_in_steps",
    "load_state",
    "sample_lag",
    "save_state",
]
