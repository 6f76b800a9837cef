"""SAT's knobs as one validated, framework-free dataclass.

Every invalid value raises :class:`SATConfigError`, which carries the offending key and value so that an
adapter can re-render the message with the user's own spelling of the key (a Hydra path, a CLI flag).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Mapping

KERNELS = ("hill_shifted", "hill", "power", "exp")
GATE_SCOPES = ("micro", "global")
GLOBAL_METHODS = ("exact", "hist")
PROXIES = ("old", "rollout")
GSPO_GATE_LEVELS = ("sequence", "token")
NONFINITE_POLICIES = ("mask", "raise")


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
    """Knobs of the Staleness-Adaptive Trust Region (SPEC §1); defaults are the paper's where it states them.

    eps_low / eps_high: nominal clip radii, interval [1 - eps_low, 1 + eps_high].
    dual_clip: dual-clip constant c > 1 for A < 0 (None disables it).
    quantile: gate level; tokens with |d| above the ``quantile`` quantile of |d| are contracted.
    gate_scope: "micro" (quantile over the local micro-batch, the paper's) or "global" (over the DP group).
    global_method: "exact" (two small collectives, exact) or "hist" (one collective, q within 2^-7 relative).
    kernel / exponent: contraction factor c = K(|d|; q) for gated tokens (see :mod:`sat_ext.core.kernels`).
    c_min: floor on c (c = max(c, c_min)); c_min = 1 turns SAT into PPO exactly.
    proxy: "old" (d = sg(logp - old_logp)) or "rollout" (d = sg(logp - rollout_logp), when given).
    gspo_gate_level: for SAT-GSPO, gate on the sequence log-ratio ("sequence") or on each token's ("token").
    nonfinite: "mask" (non-finite inputs at active tokens get zero loss and gradient, counted in a metric)
        or "raise" (a ValueError naming the tensor).
    """

    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: float | None = 3.0
    quantile: float = 0.9
    gate_scope: str = "micro"
    global_method: str = "exact"
    kernel: str = "hill_shifted"
    exponent: float = 2.0
    c_min: float = 0.0
    proxy: str = "old"
    gspo_gate_level: str = "sequence"
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
