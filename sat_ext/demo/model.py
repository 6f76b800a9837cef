"""The demo's policy: a tiny random Qwen3-MoE built offline with transformers, and the rollout engine copy.

:class:`RolloutEngine` is a second copy of the policy that only changes at a weight sync, the stand-in for
an inference engine (SGLang/vLLM). Two switches make it differ from the trainer the way a real engine does:

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
The engine's log-probs of its own samples are the ``old_log_prob`` of the loss: verl's bypass setting.
"""

from __future__ import annotations

import copy
import math
import types
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .task import VOCAB, response_mask

ENGINES = ("fp32", "bf16", "bf16-native")


@dataclass
class Rollout:
    """What an engine returns: ``responses`` (n, R) with <pad> after <eos>, ``log_probs`` (n, R) float32 the
    engine's processed log-probs of its own samples, ``routing`` (layers, n, P + R - 1, top_k) the experts
    the engine used at every teacher-forcing input position, or None when not captured."""

    responses: torch.Tensor
    log_probs: torch.Tensor
    routing: torch.Tensor | None = None


@dataclass(frozen=True)
class ModelConfig:
    """Size of the tiny Qwen3-MoE (every layer sparse: ``num_experts`` experts, top-``top_k`` routing)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    num_experts: int = 4
    top_k: int = 2
    moe_intermediate_size: int = 64
    head_dim: int = 32  # vLLM's CPU attention takes head_dim in {32, 64, 80, ...}, not 16


@dataclass(frozen=True)
class Mismatch:
    """How the rollout engine differs from the trainer (all off: identical)."""

    engine: str = "fp32"
    route_noise: float = 0.0
    rollout_top_k: int | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {list(ENGINES)}, got {self.engine!r}")
        if not (isinstance(self.route_noise, (int, float)) and math.isfinite(self.route_noise) and self.route_noise >= 0):
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


def build_policy(cfg: ModelConfig = ModelConfig(), seed: int = 0, vocab_size: int = VOCAB.size) -> torch.nn.Module:
    """A randomly initialised Qwen3MoeForCausalLM (float32, eval mode: no dropout), no download needed."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    hf_cfg = Qwen3MoeConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=2 * cfg.hidden_size,
        moe_intermediate_size=cfg.moe_intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        num_experts=cfg.num_experts,
        num_experts_per_tok=cfg.top_k,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        output_router_logits=False,
        router_aux_loss_coef=0.0,
        max_position_embeddings=32,
        tie_word_embeddings=False,
        pad_token_id=VOCAB.pad,
        bos_token_id=VOCAB.bos,
        eos_token_id=VOCAB.eos,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3MoeForCausalLM(hf_cfg)
    model.eval()  # no dropout in either copy; gradients still flow
    return model


def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The MoE router (``Qwen3MoeTopKRouter``) of every sparse layer, in layer order."""
    return [m for m in model.modules() if type(m).__name__ == "Qwen3MoeTopKRouter"]


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


def policy_inputs(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Teacher-forcing input: the prompt and all response tokens but the last."""
    return torch.cat([prompts, responses[:, :-1]], dim=1)


def token_log_probs(model: torch.nn.Module, prompts: torch.Tensor, responses: torch.Tensor,
                    temperature: float = 1.0, routing: torch.Tensor | None = None) -> torch.Tensor:
    """(n, R) float32 log-probs of ``responses`` after ``prompts`` under ``model`` (with grad if enabled);
    with ``routing`` (layers, n, P + R - 1, top_k) the forward replays those experts (R3)."""
    from .routing import replay_routing

    if routing is not None:
        with replay_routing(model, routing):
            return token_log_probs(model, prompts, responses, temperature)
    logits = model(input_ids=policy_inputs(prompts, responses), use_cache=False).logits
    logits = logits[:, prompts.shape[1] - 1 :].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def sample(model: torch.nn.Module, prompts: torch.Tensor, response_len: int, generator: torch.Generator,
           temperature: float = 1.0, greedy: bool = False) -> torch.Tensor:
    """(n, response_len) sampled tokens; positions after the first ``<eos>`` are ``<pad>``. Stops early once
    every row has ended (for evaluation; the rollout engine uses :func:`sample_and_score`)."""
    seq = prompts
    for _ in range(response_len):
        logits = model(input_ids=seq, use_cache=False).logits[:, -1].float()
        if greedy:
            nxt = logits.argmax(-1, keepdim=True)
        else:
            nxt = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator)
        seq = torch.cat([seq, nxt], dim=1)
        if bool((seq[:, prompts.shape[1]:] == VOCAB.eos).any(-1).all()):
            break
    resp = seq[:, prompts.shape[1]:]
    if resp.shape[1] < response_len:
        pad = torch.full((resp.shape[0], response_len - resp.shape[1]), VOCAB.pad, dtype=resp.dtype)
        resp = torch.cat([resp, pad], dim=1)
    return torch.where(response_mask(resp), resp, torch.full_like(resp, VOCAB.pad))


@torch.no_grad()
def sample_and_score(model: torch.nn.Module, prompts: torch.Tensor, response_len: int, generator: torch.Generator,
                     temperature: float = 1.0, capture_routing: bool = False) -> Rollout:
    """Sample ``response_len`` tokens (``<pad>`` after ``<eos>``) and return them with their log-probs.

    The log-probs come from the last decoding pass, whose input is exactly the teacher-forcing input
    ``prompt + response[:-1]`` the trainer scores, so an engine without mismatch reproduces the trainer's
    log-probs bit for bit, and the engine's own log-probs cost no extra forward pass; with
    ``capture_routing`` that pass's expert choices are the rollout's routing (R3).
    """
    from .routing import capture_routing as capture

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
        nxt = torch.where(done, torch.full_like(nxt, VOCAB.pad), nxt)
        done = done | (nxt == VOCAB.eos)
        seq = torch.cat([seq, nxt], dim=1)
    responses = seq[:, P:]
    lp = torch.log_softmax(logits[:, P - 1:].float() / temperature, dim=-1)
    return Rollout(responses, lp.gather(-1, responses.unsqueeze(-1)).squeeze(-1),
                   torch.stack(routing) if capture_routing else None)


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


def _round_bf16(_module, _inputs, output):
    if isinstance(output, tuple):
        return (output[0].to(torch.bfloat16).to(output[0].dtype),) + tuple(output[1:])
    return output.to(torch.bfloat16).to(output.dtype)


def frozen_copy(policy: torch.nn.Module, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A copy of ``policy`` in ``dtype`` without gradients (eval mode): a weight snapshot to score or sample with."""
    model = copy.deepcopy(policy).to(dtype)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


@torch.no_grad()
def copy_weights(dst: torch.nn.Module, src: torch.nn.Module) -> None:
    """Copy ``src``'s parameters into ``dst``'s by name (cast to ``dst``'s dtype), in place."""
    params = dict(src.named_parameters())
    for name, p in dst.named_parameters():
        p.copy_(params[name].detach())


class RolloutEngine:
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
    def generate(self, prompts: torch.Tensor, response_len: int, generator: torch.Generator,
                 temperature: float = 1.0, capture_routing: bool = False) -> Rollout:
        """Sample responses and score them with the engine (rollout log-probs float32; routing for R3)."""
        return sample_and_score(self.model, prompts, response_len, generator, temperature, capture_routing)

    def close(self) -> None:
        """Nothing to release: the emulated engine lives in the trainer's process."""

    @torch.no_grad()
    def log_probs(self, prompts: torch.Tensor, responses: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        return token_log_probs(self.model, prompts, responses, temperature)
