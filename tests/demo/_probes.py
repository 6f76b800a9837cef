"""Probes the demo tests read the models with (test-only: the package never needs them)."""

from __future__ import annotations

import torch

from sat_ext.demo.engines import EmulatedEngine
from sat_ext.demo.model import token_log_probs
from sat_ext.demo.routing import routers


@torch.no_grad()
def router_choices(model: torch.nn.Module, input_ids: torch.Tensor) -> list[torch.Tensor]:
    """Per sparse layer, the (n * T, top_k) expert indices the model's routers pick for ``input_ids``."""
    out: list[torch.Tensor] = []
    hooks = [r.register_forward_hook(lambda _m, _i, o: out.append(o[2].clone())) for r in routers(model)]
    try:
        model(input_ids=input_ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return out


@torch.no_grad()
def engine_log_probs(eng: EmulatedEngine, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """The emulated engine's copy's log-probs of ``responses`` (its numerics, its current weights)."""
    return token_log_probs(eng.model, prompts, responses)
