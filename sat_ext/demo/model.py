"""The demo's policy: a tiny random Qwen3-MoE built offline with transformers, and what the trainer does with it.

The policy's token ids come from its task's vocabulary (``<pad>``, ``<bos>``, ``<eos>`` are in its config);
:func:`token_log_probs` scores responses (with R3's replayed routing when given), :func:`sample` draws them
for evaluation, and :func:`frozen_copy` / :func:`copy_weights` hold the weight snapshots a run keeps. The
rollout engines that serve the policy are in :mod:`sat_ext.demo.engines`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from .routing import replay_routing
from .tasks.addition import VOCAB, CharVocab, response_mask


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


def build_policy(
    cfg: ModelConfig = ModelConfig(), seed: int = 0, vocab: CharVocab = VOCAB, max_positions: int = 32
) -> torch.nn.Module:
    """A randomly initialised Qwen3MoeForCausalLM over ``vocab`` (float32, eval mode: no dropout), no download
    needed. ``max_positions`` (prompt + response, :func:`sat_ext.demo.tasks.max_positions`) is the config's
    ``max_position_embeddings``; it changes no weight (the rotary embedding has none)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    hf_cfg = Qwen3MoeConfig(
        vocab_size=vocab.size,
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
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        pad_token_id=vocab.pad,
        bos_token_id=vocab.bos,
        eos_token_id=vocab.eos,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3MoeForCausalLM(hf_cfg)
    model.eval()  # no dropout in either copy; gradients still flow
    return model


def policy_inputs(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Teacher-forcing input: the prompt and all response tokens but the last."""
    return torch.cat([prompts, responses[:, :-1]], dim=1)


def token_log_probs(
    model: torch.nn.Module,
    prompts: torch.Tensor,
    responses: torch.Tensor,
    temperature: float = 1.0,
    routing: torch.Tensor | None = None,
) -> torch.Tensor:
    """(n, R) float32 log-probs of ``responses`` after ``prompts`` under ``model`` (with grad if enabled);
    with ``routing`` (layers, n, P + R - 1, top_k) the forward replays those experts (R3)."""
    if routing is not None:
        with replay_routing(model, routing):
            return token_log_probs(model, prompts, responses, temperature)
    logits = model(input_ids=policy_inputs(prompts, responses), use_cache=False).logits
    logits = logits[:, prompts.shape[1] - 1 :].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    prompts: torch.Tensor,
    response_len: int,
    generator: torch.Generator,
    temperature: float = 1.0,
    greedy: bool = False,
) -> torch.Tensor:
    """(n, response_len) sampled tokens; positions after the first ``<eos>`` are ``<pad>`` (the ids of the model's
    config). Stops early once every row has ended (for evaluation; the engines sample for the rollout)."""
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    seq = prompts
    for _ in range(response_len):
        logits = model(input_ids=seq, use_cache=False).logits[:, -1].float()
        if greedy:
            nxt = logits.argmax(-1, keepdim=True)
        else:
            nxt = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator)
        seq = torch.cat([seq, nxt], dim=1)
        if bool((seq[:, prompts.shape[1] :] == eos).any(-1).all()):
            break
    resp = seq[:, prompts.shape[1] :]
    if resp.shape[1] < response_len:
        tail = torch.full((resp.shape[0], response_len - resp.shape[1]), pad, dtype=resp.dtype)
        resp = torch.cat([resp, tail], dim=1)
    return torch.where(response_mask(resp, eos), resp, torch.full_like(resp, pad))


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
