"""The demo's methods: a base loss from verl's registry plus the paper's two stabilisers, R3 and TIS.

A method is written ``<loss>[+tis][+r3]``, e.g. ``gspo+tis+r3`` = the paper's "GSPO w/ TIS w/ R3":

- ``loss``: a verl policy loss (``vanilla`` = GRPO, ``gspo``, ``dppo_tv`` = DPPO, ``sat`` = SAT-GRPO,
  ``sat_gspo`` = SAT-GSPO);
- ``+r3`` (paper App. E.2, Eq. 40): the trainer replays the engine's top-k expert choice of every token;
- ``+tis`` (App. E.3, Eq. 41): every token's loss is weighted by min(pi^(l) / mu, C), the trainer-side
  log-prob at the rollout checkpoint over the engine's, capped at C (verl's token-level rollout correction);
- ``dppo_tv+toy``: DPPO-TV with its threshold delta tuned to the toy (``--dppo-toy-delta``) instead of the
  paper's 1e-3 (not the paper's; see :func:`sat_ext.demo.losses.default_settings` for why).

:data:`PAPER_TABLE1` holds the paper's Table 1 (AIME24 best checkpoint and the last-epoch mismatch d_pi, at
lag 1 and lag 8) for the rows the demo runs, so the summary can put the paper's figures beside the demo's.
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
        return (self.loss + ("+toy" if self.toy else "") + ("+tis" if self.tis else "")
                + ("+r3" if self.r3 else ""))

    @property
    def label(self) -> str:
        return (BASE_LABELS.get(self.loss, self.loss) + (" (toy delta)" if self.toy else "")
                + (" w/ TIS" if self.tis else "") + (" w/ R3" if self.r3 else ""))

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


def label(key: str) -> str:
    return parse_method(key).label


# Paper Table 1: (AIME24 best, lag 1), (AIME24 best, lag 8), (d_pi lag 1), (d_pi lag 8).
PAPER_TABLE1: dict[str, tuple[float, float, float, float]] = {
    "vanilla": (31.25, 30.17, 0.0103, 0.0110),
    "gspo": (32.25, 31.46, 0.0097, 0.0109),
    "vanilla+r3": (31.83, 29.58, 0.0058, 0.0218),
    "gspo+r3": (34.00, 33.13, 0.0091, 0.0158),
    "vanilla+tis": (31.62, 31.46, 0.0108, 0.0169),
    "gspo+tis": (32.88, 31.21, 0.0151, 0.0208),
    "vanilla+tis+r3": (31.79, 31.79, 0.0048, 0.0081),
    "gspo+tis+r3": (31.88, 32.92, 0.0054, 0.0068),
    "dppo_tv": (33.96, 32.71, 0.0108, 0.0118),
    "sat": (32.71, 32.08, 0.0101, 0.0108),
    "sat_gspo": (34.17, 32.71, 0.0095, 0.0107),
    "sat+r3": (33.75, 33.13, 0.0056, 0.0079),
    "sat_gspo+r3": (35.83, 34.79, 0.0056, 0.0076),
}
# Paper Table 8: variance of the sampled log-ratio for GRPO, trainer-side (checkpoint) denominator and the
# rollout-log-prob denominator (App. E.6), at lag 1 and lag 8.
PAPER_LOGRATIO_VAR = {"checkpoint": (2.6e-4, 1.4e-4), "rollout": (3.2e-4, 2.7e-4)}
