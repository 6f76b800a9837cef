"""The demo's methods: a base loss from verl's registry plus the paper's two stabilisers, R3 and TIS.

A method is written ``<loss>[+tis][+r3]``, e.g. ``gspo+tis+r3`` = the paper's "GSPO w/ TIS w/ R3":

- ``loss``: a verl policy loss (``vanilla`` = GRPO, ``gspo``, ``dppo_tv`` = DPPO, ``sat`` = SAT-GRPO,
  ``sat_gspo`` = SAT-GSPO);
- ``+r3`` (paper App. E.2, Eq. 40): the trainer replays the engine's top-k expert choice of every token;
- ``+tis`` (App. E.3, Eq. 41): every token's loss is weighted by min(pi^(l) / mu, C), the trainer-side
  log-prob at the rollout checkpoint over the engine's, capped at C (verl's token-level rollout correction);
- ``dppo_tv+toy``: DPPO-TV with its threshold delta tuned to the toy (``--dppo-toy-delta``) instead of the
  paper's 1e-3 (not the paper's; see :func:`sat_ext.demo.losses.default_settings` for why).
"""

from __future__ import annotations

from dataclasses import dataclass

LOSSES = ("vanilla", "gspo", "dppo_tv", "sat", "sat_gspo")
SAT_LOSSES = ("sat", "sat_gspo")
BASE_LABELS = {"vanilla": "GRPO", "gspo": "GSPO", "dppo_tv": "DPPO", "sat": "SAT-GRPO", "sat_gspo": "SAT-GSPO"}
SAT_BASE = {"sat": "vanilla", "sat_gspo": "gspo"}
# Table 1 composes TIS with GRPO and GSPO only, and DPPO with neither stabiliser.
TIS_LOSSES = ("vanilla", "gspo")
R3_LOSSES = ("vanilla", "gspo", "sat", "sat_gspo")


@dataclass(frozen=True)
class Method:
    """One row of the paper's Table 1: a base loss, with or without TIS and R3."""

    loss: str
    tis: bool = False
    r3: bool = False
    toy: bool = False

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r} in method {self.key!r}; known: {list(LOSSES)}")
        if self.tis and self.loss not in TIS_LOSSES:
            raise ValueError(f"method {self.key!r}: the paper composes TIS with {list(TIS_LOSSES)} only")
        if self.r3 and self.loss not in R3_LOSSES:
            raise ValueError(f"method {self.key!r}: the paper composes R3 with {list(R3_LOSSES)} only")
        if self.toy and self.loss != "dppo_tv":
            raise ValueError(f"method {self.key!r}: +toy (the toy-tuned threshold) applies to dppo_tv only")

    @property
    def key(self) -> str:
        return self.loss + ("+toy" if self.toy else "") + ("+tis" if self.tis else "") + ("+r3" if self.r3 else "")

    @property
    def label(self) -> str:
        return (
            BASE_LABELS.get(self.loss, self.loss)
            + (" (toy delta)" if self.toy else "")
            + (" w/ TIS" if self.tis else "")
            + (" w/ R3" if self.r3 else "")
        )

    @property
    def is_sat(self) -> bool:
        return self.loss in SAT_LOSSES

    @property
    def needs_rollout_denominator(self) -> bool:
        """DPPO's threshold is on pi - mu (paper Table 9: "needs rollout log-prob: yes")."""
        return self.loss == "dppo_tv"

    def base(self) -> "Method | None":
        """The fixed-clip recipe SAT is layered on (same stabilisers), or None for a non-SAT method."""
        return Method(SAT_BASE[self.loss], self.tis, self.r3) if self.is_sat else None


def parse_method(text: str) -> Method:
    """``"gspo+tis+r3"`` -> Method("gspo", tis=True, r3=True); suffixes in any order, each at most once."""
    loss, *flags = [p.strip() for p in text.strip().split("+")]
    unknown = [f for f in flags if f not in ("tis", "r3", "toy")]
    if unknown or len(set(flags)) != len(flags):
        raise ValueError(f"method {text!r}: expected <loss>[+toy][+tis][+r3], got suffixes {flags}")
    return Method(loss, tis="tis" in flags, r3="r3" in flags, toy="toy" in flags)
