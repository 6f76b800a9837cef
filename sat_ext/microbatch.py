"""The one rule for a micro-batch with no active token, for every adapter (verl, OpenRLHF).

A framework's mean over active tokens divides 0 by 0 on an all-padding micro-batch unless it is given global
token totals; SAT's loss there is the core's zero loss with a zero gradient and the graph kept
(:func:`sat_ext.core.empty_microbatch_loss`; the paper skips such a step).
"""

from __future__ import annotations

from typing import Callable

import torch

from sat_ext.core import empty_microbatch_loss


def aggregate(
    loss_mat: torch.Tensor, mask: torch.Tensor, empty: bool, framework_aggregate: Callable[[], torch.Tensor]
) -> torch.Tensor:
    """The micro-batch's loss: ``framework_aggregate()`` unless ``empty`` (no active token in ``mask``), then
    the core's zero loss."""
    return empty_microbatch_loss(loss_mat, mask) if empty else framework_aggregate()
