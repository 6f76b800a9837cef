"""flash-attn's ``bert_padding`` in plain torch: the gather / scatter between a padded batch ``(b, s, ...)`` and
its packed tokens ``(nnz, ...)`` that OpenRLHF's sample packing calls (flash_attn/bert_padding.py's contract)."""

import torch
import torch.nn.functional as F
from einops import rearrange

__all__ = ["index_first_axis", "pad_input", "rearrange", "unpad_input"]


def index_first_axis(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The rows ``indices`` of ``tensor``'s first axis."""
    return tensor[indices]


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask: torch.Tensor | None = None):
    """The tokens where ``attention_mask`` (``(b, s)``, plus ``unused_mask``) is set, packed: (tokens, their flat
    indices, cumulative sequence lengths from 0, the longest sequence, the used length of each sequence)."""
    masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
    lengths = masks.sum(dim=-1, dtype=torch.int32)
    used = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(masks.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    tokens = index_first_axis(rearrange(hidden_states, "b s ... -> (b s) ..."), indices)
    return tokens, indices, cu_seqlens, int(lengths.max().item()), used


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """The packed ``hidden_states`` scattered back to ``(batch, seqlen, ...)`` at ``indices``, zeros elsewhere
    (out of place: gradients flow to ``hidden_states``)."""
    output = hidden_states.new_zeros((batch * seqlen, *hidden_states.shape[1:]))
    return rearrange(output.index_put((indices,), hidden_states), "(b s) ... -> b s ...", b=batch)
