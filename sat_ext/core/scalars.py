"""Numbers as shared 0-d CPU float32 tensors, for the operands of the loss's elementwise ops.

An op given a Python number wraps it in a fresh tensor on every call (about 2 us per op on the 2-core CPU
here, as much as the op itself at 2K tokens); a 0-d CPU tensor is a scalar operand on every device (no copy
to the GPU) with the same float32 value. The tensors are shared: never modify one.
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=256)
def scalar(value: float) -> torch.Tensor:
    """``value`` as a read-only-by-convention 0-d float32 CPU tensor."""
    return torch.tensor(value, dtype=torch.float32)
