"""R3, rollout routing replay (paper App. E.2, Eq. 40), for the demo's transformers Qwen3-MoE.

The engine records which top-k experts it used for every token (:func:`capture_routing` for the emulated
engine; the vLLM engine records them in its worker). In the trainer's forward, :func:`replay_routing` makes
every MoE router use those experts, with weights from the trainer's *live* router logits restricted to them:

    g_e = I_e exp(z_e) / sum_e' I_e' exp(z_e'),   I = the engine's top-k mask, z = the trainer's logits,

which is Qwen3-MoE's renormalised top-k softmax evaluated on the replayed experts, so gradients still flow
through the router. Routing tensors are (layers, n, T, top_k) expert ids, T the forward's sequence length.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F


def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The MoE router (``Qwen3MoeTopKRouter``) of every sparse layer, in layer order."""
    return [m for m in model.modules() if type(m).__name__ == "Qwen3MoeTopKRouter"]


@contextmanager
def capture_routing(model: torch.nn.Module, n: int) -> Iterator[list[torch.Tensor | None]]:
    """Record, per sparse layer, the experts the routers pick in the *last* forward of the block, as
    (n, T, top_k); yields a list filled in place (one entry per layer)."""
    found: list[torch.Tensor | None] = [None] * len(routers(model))

    def hook(i: int):
        def record(_module, _inputs, output) -> None:
            found[i] = output[2].detach().reshape(n, -1, output[2].shape[-1]).clone()

        return record

    handles = [r.register_forward_hook(hook(i)) for i, r in enumerate(routers(model))]
    try:
        yield found
    finally:
        for h in handles:
            h.remove()


def _replayed_forward(self, hidden_states: torch.Tensor):
    # Qwen3MoeTopKRouter.forward with the top-k indices taken from the replayed routing (Eq. 40).
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router_logits = F.linear(hidden_states, self.weight)
    indices = self._sat_replay.to(router_logits.device)
    if indices.shape[0] != router_logits.shape[0]:
        raise ValueError(
            f"R3: replayed routing covers {indices.shape[0]} tokens, the forward has {router_logits.shape[0]}"
        )
    probs = torch.softmax(router_logits, dtype=torch.float, dim=-1)
    top_value = probs.gather(-1, indices)
    if self.norm_topk_prob:
        top_value = top_value / top_value.sum(dim=-1, keepdim=True)
    return router_logits, top_value.to(router_logits.dtype), indices


@contextmanager
def replay_routing(model: torch.nn.Module, routing: torch.Tensor) -> Iterator[None]:
    """Within the block, every forward of ``model`` routes each token to the experts in ``routing``
    (layers, n, T, top_k): the trainer side of R3."""
    rs = routers(model)
    if routing.shape[0] != len(rs):
        raise ValueError(f"R3: routing has {routing.shape[0]} layers, the model {len(rs)} sparse layers")
    if routing.shape[-1] != rs[0].top_k:
        raise ValueError(f"R3: routing has top-{routing.shape[-1]} experts, the model routes top-{rs[0].top_k}")
    saved = [r.__dict__.get("forward") for r in rs]  # an engine's own router patch, or None
    try:
        for r, layer in zip(rs, routing):
            r._sat_replay = layer.reshape(-1, layer.shape[-1]).long()
            r.forward = types.MethodType(_replayed_forward, r)
        yield
    finally:
        for r, fwd in zip(rs, saved):
            if fwd is None:
                del r.forward
            else:
                r.forward = fwd
            del r._sat_replay
