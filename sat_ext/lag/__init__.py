"""Lag control for asynchronous RL rollout (docs/lag.md), framework-free.

- :mod:`.config`: the validated ``lag:`` block and ``check_compatible`` for engine settings.
- :mod:`.versions`: policy versions, per-sample version spans, lag.
- :mod:`.schedule`: admission rules for bounded and interval mode.
- :mod:`.batches`: which groups are consumed next (the batch-wise FIFO rule, the drop rule, the bound).
- :mod:`.accounting`: the lags of a consumed batch (the one rule the verl sampler, OpenRLHF's trainer and the
  controller apply).
- :mod:`.metrics`: the per-step flat metrics dict, and which groups over the bound leave (dropped or regenerated).
- :mod:`.turns`: per-turn version records of agent episodes and the per-token lag metrics they give.
- :mod:`.controller`: an in-process controller built from the rules above (the demo and the simulations).

The verl integration is :mod:`sat_ext.verl.lag`, the OpenRLHF one :mod:`sat_ext.openrlhf.lag`; both use these rules.
"""

from .accounting import BatchLags, batch_lags, check_within_bound
from .batches import GroupState, first_finished, next_batch, over_bound, waits_for_stragglers
from .config import EngineSettings, LagConfig, LagConfigError, check_compatible
from .controller import Claim, ConsumedSample, LagController, LagProtocolError
from .metrics import LagMetrics
from .versions import VersionSpan, lag_in_steps, sample_lag

__all__ = [
    "BatchLags",
    "Claim",
    "ConsumedSample",
    "EngineSettings",
    "GroupState",
    "LagConfig",
    "LagConfigError",
    "LagController",
    "LagMetrics",
    "LagProtocolError",
    "VersionSpan",
    "batch_lags",
    "check_compatible",
    "check_within_bound",
    "first_finished",
    "lag_in_steps",
    "next_batch",
    "over_bound",
    "sample_lag",
    "waits_for_stragglers",
]
