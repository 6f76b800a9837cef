"""The emulated rollout engine: a second copy of the policy in the trainer's process (the fallback engine).

:class:`EmulatedEngine` only changes at a weight sync, the stand-in for an inference engine where vLLM cannot
run. Two switches make it differ from the trainer the way a real engine does:

- ``engine="bf16"``: a bfloat16 engine, emulated: its weights, the output of every attention and MoE block
  and its logits are rounded to bfloat16 while the arithmetic stays float32 (CPU bfloat16 matmuls are
  2.5x slower here, and the emulation gives the same size of mismatch: mean |log r| ~6e-3 against ~1e-2
  for native bf16 on the warm-started policy). ``engine="bf16-native"`` runs the copy in real bfloat16.
  Either way its log-probs of the same tokens differ from the trainer's by a small, nonzero amount
  (engine numerics mismatch);
- ``route_noise=sigma`` / ``rollout_top_k=k``: its MoE routers add ``sigma * (h @ N)`` to the router logits
  (``N`` a fixed random matrix with unit-variance logits, drawn once per engine and kept across syncs, so
  sampling and scoring see the same router) and/or pick a different number of experts. Tokens whose
  expert choice sits near a tie are routed to other experts than in the trainer, which gives a few
  tokens large log-ratios and the rest none: a heterogeneous staleness tail (MoE routing mismatch; R3
  routing replay would remove it).

With every switch off the engine's log-probs equal the trainer's bit for bit (same weights, same code path).
"""

from __future__ import annotations

import math
import types

import torch
import torch.nn.functional as F

from ..model import copy_weights, frozen_copy
from ..routing import capture_routing as capture
from ..routing import routers
from .base import Mismatch, Rollout


def _perturbed_router_forward(self, hidden_states: torch.Tensor):
    # Qwen3MoeTopKRouter.forward with a fixed additive perturbation of the logits and its own top-k.
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router_logits = F.linear(hidden_states, self.weight)
    if self._sat_noise_scale:
        noise = F.linear(hidden_states, self._sat_noise.to(hidden_states.dtype))
        router_logits = router_logits + self._sat_noise_scale * noise
    router_probs = torch.nn.functional.softmax(router_logits, dtype=torch.float, dim=-1)
    router_top_value, router_indices = torch.topk(router_probs, self._sat_top_k, dim=-1)
    if self.norm_topk_prob:
        router_top_value = router_top_value / router_top_value.sum(dim=-1, keepdim=True)
    router_top_value = router_top_value.to(router_logits.dtype)
    return router_logits, router_top_value, router_indices


@torch.no_grad()
def sample_and_score(
    model: torch.nn.Module,
    prompts: torch.Tensor,
    response_len: int,
    generator: torch.Generator,
    temperature: float = 1.0,
    capture_routing: bool = False,
) -> Rollout:
    """Sample ``response_len`` tokens (``<pad>`` after ``<eos>``, the ids of the model's config) and return them
    with their log-probs.

    The log-probs come from the last decoding pass, whose input is exactly the teacher-forcing input
    ``prompt + response[:-1]`` the trainer scores, so an engine without mismatch reproduces the trainer's
    log-probs bit for bit, and the engine's own log-probs cost no extra forward pass; with
    ``capture_routing`` that pass's expert choices are the rollout's routing (R3).
    """
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    P = prompts.shape[1]
    seq = prompts
    done = torch.zeros(prompts.shape[0], 1, dtype=torch.bool)
    logits = None
    for step in range(response_len):
        if capture_routing and step == response_len - 1:
            with capture(model, prompts.shape[0]) as routing:
                logits = model(input_ids=seq, use_cache=False).logits
        else:
            logits = model(input_ids=seq, use_cache=False).logits
        nxt = torch.multinomial(torch.softmax(logits[:, -1].float() / temperature, dim=-1), 1, generator=generator)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        done = done | (nxt == eos)
        seq = torch.cat([seq, nxt], dim=1)
    responses = seq[:, P:]
    lp = torch.log_softmax(logits[:, P - 1 :].float() / temperature, dim=-1)
    return Rollout(
        responses, lp.gather(-1, responses.unsqueeze(-1)).squeeze(-1), torch.stack(routing) if capture_routing else None
    )


def _round_bf16(_module, _inputs, output):
    if isinstance(output, tuple):
        return (output[0].to(torch.bfloat16).to(output[0].dtype),) + tuple(output[1:])
    return output.to(torch.bfloat16).to(output.dtype)


class EmulatedEngine:
    """The rollout copy of the policy: holds the weights of its last sync (``version``), with the mismatch."""

    def __init__(self, policy: torch.nn.Module, mismatch: Mismatch = Mismatch(), seed: int = 0):
        self.mismatch = mismatch
        self.dtype = torch.bfloat16 if mismatch.engine == "bf16-native" else torch.float32
        self.round_weights = mismatch.engine == "bf16"
        self.model = frozen_copy(policy, self.dtype)
        if self.round_weights:
            self._round_params()
            for layer in self.model.model.layers:
                layer.self_attn.register_forward_hook(_round_bf16)
                layer.mlp.register_forward_hook(_round_bf16)
            self.model.lm_head.register_forward_hook(_round_bf16)
        self.version = 0
        if mismatch.perturbs_routing:
            g = torch.Generator().manual_seed(10_007 + seed)
            for r in routers(self.model):
                noise = torch.randn(r.weight.shape, generator=g) / math.sqrt(r.weight.shape[1])
                r.register_buffer("_sat_noise", noise.to(self.dtype), persistent=False)
                r._sat_noise_scale = float(mismatch.route_noise)
                r._sat_top_k = int(mismatch.rollout_top_k or r.top_k)
                r.forward = types.MethodType(_perturbed_router_forward, r)

    def sync(self, policy: torch.nn.Module, version: int) -> None:
        """Broadcast the trainer's weights (cast to the engine dtype); the engine now serves ``version``."""
        copy_weights(self.model, policy)
        if self.round_weights:
            self._round_params()
        self.version = version

    @torch.no_grad()
    def _round_params(self) -> None:
        for p in self.model.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))

    @torch.no_grad()
    def generate(
        self,
        prompts: torch.Tensor,
        response_len: int,
        generator: torch.Generator,
        temperature: float = 1.0,
        capture_routing: bool = False,
    ) -> Rollout:
        """Sample responses and score them with the engine (rollout log-probs float32; routing for R3)."""
        return sample_and_score(self.model, prompts, response_len, generator, temperature, capture_routing)

    def close(self) -> None:
        """Nothing to release: the emulated engine lives in the trainer's process."""
