"""The vLLM worker extension of the CPU setup: OpenRLHF's ``WorkerWrap`` plus a reload of weights saved to a
file, through vLLM's CPU reload path (:func:`sat_ext.vllm_cpu.reload_weights`)."""

from __future__ import annotations

import torch
from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap

from sat_ext.vllm_cpu import reload_weights


class CPUWorkerWrap(WorkerWrap):
    """``WorkerWrap`` with :meth:`sat_ext_load_weights` (NCCL weight updates do not exist on the CPU)."""

    def sat_ext_load_weights(self, path: str) -> None:
        """Load the state dict at ``path`` (Hugging Face names) into this worker's model."""
        reload_weights(self.model_runner, torch.load(path, weights_only=True).items())
