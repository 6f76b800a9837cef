"""verl's vLLM worker extension with the private hooks the CPU setup overrides forwarded to public methods (the
entries of :data:`sat_ext.verl.cpu.upstream.SUBCLASSED`); imported only where the extension is (the vLLM worker)."""

from __future__ import annotations

import torch
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

from .upstream import check_subclassed

check_subclassed()


class WorkerExtensionSeam(vLLMColocateWorkerExtension):
    """verl calls the private hooks; a subclass overrides :meth:`load_bucket` and :meth:`models_to_post_process`."""

    def _update_weights(self, weights: list[tuple[str, torch.Tensor]], peft_config: dict, base_sync_done: bool):
        return self.load_bucket(weights, peft_config)

    def _iter_all_models_with_config(self):
        return self.models_to_post_process()

    def load_bucket(self, weights: list[tuple[str, torch.Tensor]], peft_config: dict) -> None:
        """One received bucket of weights into the served model (verl's ``_update_weights``)."""
        raise NotImplementedError

    def models_to_post_process(self):
        """The models verl post-processes after the last bucket (verl's ``_iter_all_models_with_config``)."""
        return vLLMColocateWorkerExtension._iter_all_models_with_config(self)
