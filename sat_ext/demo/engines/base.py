"""What every rollout engine takes and returns: the :class:`Mismatch` it may emulate, the :class:`Rollout` it
returns, and the :class:`RolloutEngine` interface the run loop calls."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

NUMERICS = ("fp32", "bf16", "bf16-native")


@dataclass
class Rollout:
    """What an engine returns: ``responses`` (n, R) with <pad> after <eos>, ``log_probs`` (n, R) float32 the
    engine's processed log-probs of its own samples, ``routing`` (layers, n, P + R - 1, top_k) the experts
    the engine used at every teacher-forcing input position, or None when not captured."""

    responses: torch.Tensor
    log_probs: torch.Tensor
    routing: torch.Tensor | None = None


@dataclass(frozen=True)
class Mismatch:
    """How the rollout engine differs from the trainer (all off: identical). ``engine`` is its numerics
    (``NUMERICS``); ``route_noise`` / ``rollout_top_k`` perturb the emulated engine's routers."""

    engine: str = "fp32"
    route_noise: float = 0.0
    rollout_top_k: int | None = None

    def __post_init__(self) -> None:
        if self.engine not in NUMERICS:
            raise ValueError(f"engine must be one of {list(NUMERICS)}, got {self.engine!r}")
        if not (
            isinstance(self.route_noise, (int, float)) and math.isfinite(self.route_noise) and self.route_noise >= 0
        ):
            raise ValueError(f"route_noise must be a finite number >= 0, got {self.route_noise!r}")
        if self.rollout_top_k is not None and self.rollout_top_k < 1:
            raise ValueError(f"rollout_top_k must be >= 1 or None, got {self.rollout_top_k!r}")

    @property
    def perturbs_routing(self) -> bool:
        """Whether the emulated engine's routers differ from the trainer's (noise or another top-k)."""
        return bool(self.route_noise) or self.rollout_top_k is not None

    @property
    def off(self) -> bool:
        return self.engine == "fp32" and not self.perturbs_routing

    def describe(self) -> str:
        parts = [f"numerics {self.engine}"]
        parts.append(f"route noise {self.route_noise:g}" if self.route_noise else "no route noise")
        if self.rollout_top_k is not None:
            parts.append(f"rollout top-k {self.rollout_top_k}")
        return ", ".join(parts)


class RolloutEngine(Protocol):
    """A rollout engine serving the weights of its last sync (``version``).

    ``generate`` samples ``response_len`` tokens per prompt (``<pad>`` after ``<eos>``, the ids of the
    policy's config) with per-prompt randomness drawn from ``generator``, and returns them with the engine's
    log-probs (and, with ``capture_routing``, its expert choices for R3); ``sync`` loads the trainer's
    weights as ``version``; ``close`` releases what the engine holds."""

    version: int

    def generate(
        self,
        prompts: torch.Tensor,
        response_len: int,
        generator: torch.Generator,
        temperature: float = 1.0,
        capture_routing: bool = False,
    ) -> Rollout: ...

    def sync(self, policy: torch.nn.Module, version: int) -> None: ...

    def close(self) -> None: ...
