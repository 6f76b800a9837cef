"""SAT's knobs as one validated, framework-free dataclass.

Every invalid value raises :class:`SATConfigError`, which carries the offending key and value so that an
adapter can re-render the message with the user's own spelling of the key (a Hydra path, a CLI flag).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Mapping

KERNELS = ("hill", "hill_shifted", "power", "exp")
QUANTILE_RULES = ("inverse_cdf", "linear")
GATE_SCOPES = ("micro", "global")
GLOBAL_METHODS = ("exact", "hist")
PROXIES = ("old", "rollout")
GSPO_GATE_LEVELS = ("broadcast", "sequence", "token")
NONFINITE_POLICIES = ("mask", "raise")
LOG_RATIO_CLAMP = 20.0  # the base recipes' extras, not the paper's: verl's vanilla clamps the log-ratio at +-20,
GSPO_LOG_RATIO_MAX = 10.0  # and verl's gspo the sequence log-ratio at 10


class SATConfigError(ValueError):
    """A SAT setting is invalid; ``key`` names the setting as the user wrote it, ``value`` is what they gave."""

    def __init__(self, key: str, value: Any, reason: str):
        self.key, self.value, self.reason = key, value, reason
        super().__init__(f"{key} {reason}, got {value!r}")

    def renamed(self, key_of: Callable[[str], str]) -> "SATConfigError":
        """The same error with the key spelt as ``key_of(field_name)`` (e.g. a Hydra path or a CLI flag)."""
        return SATConfigError(key_of(self.key), self.value, self.reason)


def _is_real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


@dataclass(frozen=True)
class SATConfig:
    """Knobs of the Staleness-Adaptive Trust Region; every default is the paper's (arXiv 2607.18722, §4.2).

    eps_low / eps_high: nominal clip radii, interval [1 - eps_low, 1 + eps_high] (paper: 0.2 / 0.2, Table 9).
    dual_clip: dual-clip constant c > 1 for A < 0 (None disables it): a base-recipe extra (verl's vanilla),
        not part of Eq. 19.
    quantile: the level alpha of Eq. 14 (paper: 0.90).
    quantile_rule: "inverse_cdf" (paper, Eq. 14: q is the ceil(alpha * n)-th smallest |d|) or "linear"
        (not the paper's: torch.quantile's interpolation between order statistics).
    gate_scope: "micro" (paper: the quantile over the local micro-batch) or "global" (not the paper's: over
        the data-parallel group).
    global_method: "exact" (two small collectives, exact) or "hist" (one collective, q within 2^-7 relative).
    kernel / exponent: contraction factor c = K(|d|; q) of gated tokens (paper: "hill", 1 / (1 + (|d|/q)^2),
        Eq. 15; see :mod:`sat_ext.core.kernels` for the other forms, none of them the paper's).
    c_min: floor on c (c = max(c, c_min); paper: none, 0); c_min = 1 turns SAT into PPO exactly.
    proxy: "old" (paper: d = sg(logp - old_logp), the ratio's own log) or "rollout" (d against the rollout
        log-prob, when given).
    gspo_gate_level: SAT-GSPO's score and quantile: "broadcast" (paper, Eq. 20: the sequence log-ratio on
        every active token, token quantile), "sequence" (one score per sequence, per-sequence quantile) or
        "token" (each token's own log-ratio); the last two are not the paper's.
    nonfinite: "mask" (non-finite inputs at active tokens get zero loss and gradient, counted in a metric)
        or "raise" (a ValueError naming the tensor).
    """

    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: float | None = 3.0
    quantile: float = 0.9
    quantile_rule: str = "inverse_cdf"
    gate_scope: str = "micro"
    global_method: str = "exact"
    kernel: str = "hill"
    exponent: float = 2.0
    c_min: float = 0.0
    proxy: str = "old"
    gspo_gate_level: str = "broadcast"
    nonfinite: str = "mask"

    def __post_init__(self) -> None:
        for name in ("eps_low", "eps_high"):
            v = getattr(self, name)
            if not _is_real(v) or v < 0:
                raise SATConfigError(name, v, "must be a finite number >= 0")
        if self.eps_low >= 1:
            raise SATConfigError("eps_low", self.eps_low, "must be < 1 (the lower bound 1 - eps_low must stay > 0)")
        if self.dual_clip is not None and (not _is_real(self.dual_clip) or self.dual_clip <= 1):
            raise SATConfigError("dual_clip", self.dual_clip, "must be a finite number > 1 (or None to disable)")
        if not _is_real(self.quantile) or not 0 < self.quantile < 1:
            raise SATConfigError("quantile", self.quantile, "must be a number strictly between 0 and 1")
        if not _is_real(self.exponent) or self.exponent <= 0:
            raise SATConfigError("exponent", self.exponent, "must be a finite number > 0")
        if not _is_real(self.c_min) or not 0 <= self.c_min <= 1:
            raise SATConfigError("c_min", self.c_min, "must be a number in [0, 1]")
        for name, allowed in (
            ("quantile_rule", QUANTILE_RULES),
            ("gate_scope", GATE_SCOPES),
            ("global_method", GLOBAL_METHODS),
            ("kernel", KERNELS),
            ("proxy", PROXIES),
            ("gspo_gate_level", GSPO_GATE_LEVELS),
            ("nonfinite", NONFINITE_POLICIES),
        ):
            v = getattr(self, name)
            if v not in allowed:
                raise SATConfigError(name, v, f"must be one of {list(allowed)}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], key_of: Callable[[str], str] = str) -> "SATConfig":
        """Build from a mapping of field names; unknown names and bad values raise with ``key_of(name)``."""
        known = {f.name for f in fields(cls)}
        for name in values:
            if name not in known:
                raise SATConfigError(key_of(name), values[name], f"is not a SAT setting (known: {sorted(known)})")
        try:
            return cls(**dict(values))
        except SATConfigError as e:
            raise e.renamed(key_of) from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
