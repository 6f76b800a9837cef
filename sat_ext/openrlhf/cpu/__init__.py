"""An opt-in CPU setup for OpenRLHF 0.11.2's own Ray PPO loop, for ``sat-ext smoke openrlhf`` on a machine
without a GPU.

Off unless ``SAT_EXT_OPENRLHF_CPU=1`` is set in a process's environment *and* :func:`activate` runs there.
The smoke command does both for its own run only: it sets the variable and puts :data:`SITE` on that run's
``PYTHONPATH``; :data:`SITE` holds a ``sitecustomize`` that calls :func:`activate` at interpreter start (in
the CLI process, every Ray worker and every vLLM process, which inherit both) and a ``flash_attn`` stand-in
(OpenRLHF imports ``flash_attn`` at module level for packing and ring attention, which the CPU run does not
use; it has no distribution metadata, so transformers still reports flash-attn as absent). Neither is ever
importable outside such a run.

:func:`activate` installs post-import hooks (:mod:`.hooks`) that apply :data:`.upstream.PATCHES` when their
modules load: DeepSpeed on its CPU accelerator with gloo (torch.cuda no-ops, the device mesh and the replay
buffer on the host, torch's AdamW), and weights to vLLM's CPU engine through a file
(:mod:`.weights`, :mod:`.vllm_engine`, :mod:`.vllm_worker`). Besides it needs public settings only
(:func:`cpu_environment`, :data:`CPU_FLAGS`): logical GPU slots in a private Ray instance, DeepSpeed's CPU
accelerator, vLLM's CPU cache size, eager vLLM, sdpa attention, ZeRO stage 0.

It refuses to patch anything where CUDA is available: on a GPU machine nothing here changes anything.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

ENV_FLAG = "SAT_EXT_OPENRLHF_CPU"
SITE = Path(__file__).with_name("site")
#: logical GPU slots Ray declares: OpenRLHF places every DeepSpeed rank and vLLM engine on one "GPU"
RAY_GPU_SLOTS = 4
RAY_CPU_SLOTS = 16
#: OpenRLHF flags the CPU run needs (all public)
CPU_FLAGS = (
    "--vllm.enforce_eager",  # no CUDA graphs
    "--ds.attn_implementation",
    "sdpa",  # flash_attention_2 by default
    "--ds.zero_stage",
    "0",
)

_active = False


def requested() -> bool:
    """Whether this process was asked to run OpenRLHF on the CPU (``SAT_EXT_OPENRLHF_CPU=1``)."""
    return os.environ.get(ENV_FLAG, "") == "1"


def cpu_environment() -> dict[str, str]:
    """Environment variables of a CPU run (its Ray workers and vLLM processes inherit them)."""
    return {
        ENV_FLAG: "1",
        "DS_ACCELERATOR": "cpu",
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # the machine's cores are shared
        "RAY_ADDRESS": "local",  # OpenRLHF's bare ray.init(): a private instance, never another one on the machine
        "RAY_OVERRIDE_RESOURCES": json.dumps({"CPU": RAY_CPU_SLOTS, "GPU": RAY_GPU_SLOTS}),
    }


def run_environment(device: str, datasets_cache: Path, path_first: Sequence[str] = ()) -> dict[str, str]:
    """The environment an OpenRLHF run sat_ext starts adds (the smoke's, the preflight's): offline Hugging Face
    with ``datasets_cache``, a private Ray instance, ``path_first`` first on ``PYTHONPATH``, and on the CPU this
    setup (:func:`cpu_environment`, :data:`SITE` on ``PYTHONPATH``)."""
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(datasets_cache),
        "TOKENIZERS_PARALLELISM": "false",
        "RAY_ADDRESS": "local",  # OpenRLHF's bare ray.init(): never another instance on the machine
    }
    path = list(path_first)
    if device == "cpu":
        env.update(cpu_environment())
        path.append(str(SITE))
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def _refuse_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        raise RuntimeError(
            f"{ENV_FLAG}=1 asks for OpenRLHF's CPU setup, but CUDA is available here: unset {ENV_FLAG} "
            "(the CPU setup never runs on a GPU machine)"
        )


def activate() -> None:
    """Check the pinned versions and hook every patch to its module's import (idempotent)."""
    global _active
    if _active:
        return
    from . import hooks, upstream

    upstream.check_versions()
    for patch in upstream.PATCHES:
        hooks.when_imported(patch.when, _applier(patch))
    _active = True


def _applier(patch):
    """The hook that applies ``patch`` once its trigger module has loaded (after refusing a CUDA machine)."""

    def apply(_trigger) -> None:
        import importlib

        from . import upstream

        _refuse_cuda()
        upstream.apply(patch, importlib.import_module(patch.module))

    return apply
