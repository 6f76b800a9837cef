"""vLLM worker extension for verl on vLLM's CPU build: weight updates through vLLM's own reload path.

verl's :class:`vLLMColocateWorkerExtension` loads each received bucket with ``model.load_weights``, which
fails on vLLM 0.31's CPU build once its kernels have repacked the linear and MoE weights at load time
(``'Parameter' object has no attribute 'weight_loader'``). This subclass loads the buckets through vLLM's reload
path instead (:func:`sat_ext.vllm_cpu.reload_weights`, with the MoE prepack a reload skips). The received tensors
are copied first: they are views into verl's shared-memory bucket, which verl closes after the last bucket.

The reload has processed the weights, so verl's own processing after the last bucket (vLLM's
``process_weights_after_loading`` on every model of :meth:`_iter_all_models_with_config`) must not run again: it
is not idempotent on the CPU build. On a CPU with AVX512-BF16 it takes the linear layers' already removed
weights for convolution weights and fails (``IndexError: Dimension out of range`` in
``dispatch_cpu_unquantized_gemm``), which stopped every verl smoke variant there; on an AVX2 CPU it returned
early. The subclass yields no model to post-process.
Selected with ``actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls`` (a public key).
"""

from __future__ import annotations

import torch

from sat_ext.vllm_cpu import reload_weights

from .worker_seam import WorkerExtensionSeam


class CPUWorkerExtension(WorkerExtensionSeam):
    """verl's extension with its bucket load replaced for the CPU build (module doc)."""

    def load_bucket(self, weights: list[tuple[str, torch.Tensor]], peft_config: dict) -> None:
        if peft_config:
            raise NotImplementedError("sat_ext's CPU setup does not sync LoRA adapters")
        reload_weights(self.model_runner, [(name, tensor.detach().clone()) for name, tensor in weights])

    def models_to_post_process(self):
        """None: :meth:`load_bucket`'s reload has processed them (module doc)."""
        return iter(())
