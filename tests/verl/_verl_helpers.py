"""Shared helpers for the verl 0.9.1 integration tests (real verl, no mocks).

* configs: verl's packaged Hydra config composed exactly as the trainer does, then converted to the worker's
  ActorConfig with ``omega_conf_to_dataclass`` as ``engine_workers.py`` does;
* batches: a left/right padded DataProto as the rollout produces it, converted by verl's own
  ``to_tensordict`` + ``left_right_2_no_padding`` as ``ray_trainer._update_actor`` does, with the non-tensor
  ``dp_size`` / ``batch_num_tokens`` / ``global_batch_size`` the engines attach, chunked into micro-batches
  with verl's ``chunk_tensordict``;
* model output: the flat (nested, jagged) ``log_probs`` layout of verl's engines, where the log-prob of
  token j+1 sits at position j of each packed sequence. The response log-probs come from a leaf tensor
  ``theta`` of shape (bs, resp_len); the other positions come from a leaf ``junk`` that must get no gradient.

This file has a unique name (no ``__init__.py`` here: a ``tests/verl`` package would shadow verl itself).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache

import torch
import verl  # noqa: F401  (runs verl's plugin loading, as every verl process does)
from verl import DataProto
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import left_right_2_no_padding

TARGET = "sat_ext.verl.config.SATPolicyLossConfig"
PL = "actor_rollout_ref.actor.policy_loss."
ACTOR = "actor_rollout_ref.actor."
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean")
CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def sat_overrides(loss_mode: str = "sat", **knobs) -> list[str]:
    """The documented overrides that select SAT: the ``_target_``, ``loss_mode`` and ``+...sat_<knob>=v``."""
    out = [f"{PL}_target_={TARGET}", f"{PL}loss_mode={loss_mode}", f"{ACTOR}ppo_micro_batch_size_per_gpu=2"]
    out += [f"+{PL}sat_{k}={v}" for k, v in knobs.items()]
    return out


@lru_cache(maxsize=None)
def _compose_cached(config_name: str, overrides: tuple[str, ...]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


def compose(overrides: list[str], config_name: str = "ppo_trainer"):
    """verl's full trainer DictConfig (a fresh copy each call; composition itself is cached)."""
    from omegaconf import OmegaConf

    cfg = _compose_cached(config_name, tuple(overrides))
    return OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))


def compose_uncached(overrides: list[str], config_name: str = "ppo_trainer"):
    return _compose_cached.__wrapped__(config_name, tuple(overrides))


def build_actor_config(cfg_actor):
    """The worker's ActorConfig, exactly as ``engine_workers.py:593`` builds it."""
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(cfg_actor)


def actor_config(loss_mode: str = "sat", config_name: str = "ppo_trainer", extra: tuple[str, ...] = (), **knobs):
    """Compose + convert: an ActorConfig with SAT selected through ``_target_`` (or a plain verl loss)."""
    if loss_mode in ("sat", "sat_gspo"):
        overrides = sat_overrides(loss_mode, **knobs)
    else:
        overrides = [f"{PL}loss_mode={loss_mode}", f"{ACTOR}ppo_micro_batch_size_per_gpu=2"]
    return build_actor_config(compose(overrides + list(extra), config_name).actor_rollout_ref.actor)


@dataclass
class VerlBatch:
    """A padded rollout batch (what the driver holds) plus its verl no-padding TensorDict form."""

    prompt_lens: torch.Tensor
    resp_lens: torch.Tensor
    padded: dict[str, torch.Tensor]
    td: object = None  # the TensorDict after left_right_2_no_padding + non-tensor global info
    extra: dict = field(default_factory=dict)


def make_padded_batch(
    bs: int = 8,
    prompt_len: int = 5,
    resp_len: int = 7,
    seed: int = 0,
    log_ratio_scale: float = 0.3,
    with_rollout_log_probs: bool = False,
    with_rollout_is_weights: bool = False,
    min_resp: int = 1,
) -> VerlBatch:
    """Left-padded prompts, right-padded responses, masks, positions, old log-probs and advantages."""
    g = torch.Generator().manual_seed(seed)
    p_lens = torch.randint(1, prompt_len + 1, (bs,), generator=g)
    r_lens = torch.randint(min_resp, resp_len + 1, (bs,), generator=g)
    r_lens[0] = resp_len  # at least one full-length response (max_response_len == resp_len)
    ar_p, ar_r = torch.arange(prompt_len), torch.arange(resp_len)
    prompt_mask = (ar_p.unsqueeze(0) >= (prompt_len - p_lens).unsqueeze(1)).long()  # left padding
    resp_mask_att = (ar_r.unsqueeze(0) < r_lens.unsqueeze(1)).long()  # right padding
    prompts = torch.randint(3, 100, (bs, prompt_len), generator=g) * prompt_mask
    responses = torch.randint(3, 100, (bs, resp_len), generator=g) * resp_mask_att
    attention_mask = torch.cat([prompt_mask, resp_mask_att], dim=1)
    position_ids = (torch.cumsum(attention_mask, dim=1) - 1).clamp_min(0)
    response_mask = resp_mask_att.clone()
    # A masked-out token inside a response (a tool-output token, say), as multi-turn rollouts produce.
    if bs > 1 and resp_len > 2 and r_lens[1] > 2:
        response_mask[1, 1] = 0
    old_log_probs = -torch.rand((bs, resp_len), generator=g) * 3.0 - 0.05
    advantages = torch.randn((bs, 1), generator=g).expand(bs, resp_len).contiguous()
    padded = dict(
        prompts=prompts,
        responses=responses,
        input_ids=torch.cat([prompts, responses], dim=1),
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_mask=response_mask,
        old_log_probs=old_log_probs * resp_mask_att,
        advantages=advantages * response_mask,
    )
    if with_rollout_log_probs:
        padded["rollout_log_probs"] = (old_log_probs + torch.randn((bs, resp_len), generator=g) * 0.05) * resp_mask_att
    if with_rollout_is_weights:
        padded["rollout_is_weights"] = (torch.rand((bs, resp_len), generator=g) * 1.5 + 0.25) * resp_mask_att
    theta = (old_log_probs + torch.randn((bs, resp_len), generator=g) * log_ratio_scale).clamp(max=-1e-3)
    return VerlBatch(p_lens, r_lens, padded, extra={"theta0": theta * resp_mask_att})


def to_verl_td(batch: VerlBatch, dp_size: int = 1, batch_num_tokens=None, global_batch_size=None):
    """DataProto -> TensorDict -> verl's no-padding form, plus the engines' non-tensor global batch info."""
    dp = DataProto.from_dict(tensors={k: v.clone() for k, v in batch.padded.items()})
    td = left_right_2_no_padding(dp.to_tensordict())
    tu.assign_non_tensor(td, dp_size=dp_size, batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size)
    batch.td = td
    return td


def rows_of(td) -> torch.Tensor:
    """Global row indices carried in the TensorDict (set by :func:`tag_rows`)."""
    return td["row_id"]


def tag_rows(batch: VerlBatch) -> None:
    batch.padded["row_id"] = torch.arange(batch.padded["prompts"].shape[0])


def model_log_probs(micro_td, theta: torch.Tensor, junk: torch.Tensor) -> torch.Tensor:
    """The engines' nested ``log_probs`` for one micro-batch: per packed sequence of p + r tokens, position j
    holds log p(token j+1), so response token k sits at p + k - 1; every other position is ``junk``."""
    rows = rows_of(micro_td)
    att = micro_td["attention_mask"]
    plen = micro_td["prompts"].shape[1]
    p_lens, r_lens = att[:, :plen].sum(1), att[:, plen:].sum(1)
    pieces = []
    for b in range(len(rows)):
        i, p, r = int(rows[b]), int(p_lens[b]), int(r_lens[b])
        pieces += [junk[i, : p - 1], theta[i, :r], junk[i, p - 1 : p]]
    flat = torch.cat(pieces)
    offsets = micro_td["input_ids"].offsets()
    assert int(offsets[-1]) == flat.numel()
    return torch.nested.nested_tensor_from_jagged(flat, offsets)


def padded_log_prob(batch: VerlBatch, theta: torch.Tensor, rows=None) -> torch.Tensor:
    """What ppo_loss sees after no_padding_2_padding: theta on response tokens, 0 on right padding."""
    rows = torch.arange(theta.shape[0]) if rows is None else rows
    r = batch.resp_lens[rows]
    keep = torch.arange(theta.shape[1]).unsqueeze(0) < r.unsqueeze(1)
    return torch.where(keep, theta[rows], torch.zeros((), dtype=theta.dtype))


def leaves(batch: VerlBatch, theta: torch.Tensor | None = None):
    th = (batch.extra["theta0"] if theta is None else theta).clone().requires_grad_(True)
    plen = batch.padded["prompts"].shape[1]
    junk = torch.full((th.shape[0], plen + 1), -0.7).requires_grad_(True)
    return th, junk


def split_batch(batch: VerlBatch, rows) -> VerlBatch:
    """The rows of one emulated data-parallel rank (row ids from :func:`tag_rows` are kept)."""
    rows = torch.as_tensor(rows)
    padded = {k: v[rows].clone() for k, v in batch.padded.items()}
    return VerlBatch(batch.prompt_lens[rows], batch.resp_lens[rows], padded, extra=dict(batch.extra))


def batch_from_log_ratios(
    old: torch.Tensor, d: torch.Tensor, adv: torch.Tensor, resp_lens: torch.Tensor, prompt_len: int = 3, seed: int = 0
) -> VerlBatch:
    """An engine-shaped batch whose response log-probs are exactly ``old + d`` (on active tokens)."""
    bs, resp_len = old.shape
    b = make_padded_batch(bs=bs, prompt_len=prompt_len, resp_len=resp_len, seed=seed)
    keep = torch.arange(resp_len).unsqueeze(0) < resp_lens.unsqueeze(1)
    att = b.padded["attention_mask"].clone()
    att[:, prompt_len:] = keep.long()
    b.padded["attention_mask"] = att
    b.padded["position_ids"] = (torch.cumsum(att, dim=1) - 1).clamp_min(0)
    b.padded["responses"] = b.padded["responses"] * keep
    b.padded["input_ids"] = torch.cat([b.padded["prompts"], b.padded["responses"]], dim=1)
    b.padded["response_mask"] = keep.long()
    b.padded["old_log_probs"] = old * keep
    b.padded["advantages"] = adv * keep
    b.resp_lens = resp_lens.clone()
    b.extra["theta0"] = (old + d) * keep
    return b
