"""The SAT math, framework-free (imports only torch): config, kernels, quantiles, trust region, losses."""

from .config import SATConfig, SATConfigError
from .kernels import contraction
from .losses import METRIC_KEYS, SATLossOutput, aggregate, empty_microbatch_loss, sat_gspo_loss, sat_token_loss
from .quantile import global_masked_quantile, masked_quantile
from .trust_region import TrustRegion, adaptive_trust_region, gate_threshold

__all__ = [
    "METRIC_KEYS",
    "SATConfig",
    "SATConfigError",
    "SATLossOutput",
    "TrustRegion",
    "adaptive_trust_region",
    "aggregate",
    "contraction",
    "empty_microbatch_loss",
    "gate_threshold",
    "global_masked_quantile",
    "masked_quantile",
    "sat_gspo_loss",
    "sat_token_loss",
]
