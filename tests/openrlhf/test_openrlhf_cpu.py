"""sat_ext's opt-in CPU setup for OpenRLHF (sat_ext.openrlhf.cpu): off by default, complete when asked for, never
on CUDA; its flash-attn stand-in invisible to transformers; its post-import hooks.

The live loop that uses it is tests/smoke/test_smoke_openrlhf_live.py; these check its parts in fresh
interpreters (the stand-in and the start-up hook exist only on such a process's PYTHONPATH).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("openrlhf")
pytest.importorskip("deepspeed")
pytest.importorskip("vllm")

from sat_ext.openrlhf import cpu  # noqa: E402
from sat_ext.openrlhf.cpu import hooks, upstream  # noqa: E402

PROBE = textwrap.dedent(
    """
    import json, torch
    import transformers.utils
    import openrlhf.utils.deepspeed.deepspeed as ds
    from openrlhf.trainer.ray import ppo_actor, vllm_engine
    from openrlhf.trainer.ppo_utils import replay_buffer
    from sat_ext.openrlhf.cpu.upstream import PATCHES, WHAT, check_symbols
    from sat_ext.pinned import OPENRLHF_CPU_PINS, PATCHED, resolve
    import importlib
    patched = [p.attribute for p in PATCHES if getattr(
        resolve(importlib.import_module(p.module), p.attribute, WHAT, OPENRLHF_CPU_PINS)[2], PATCHED, False)]
    buffer = replay_buffer.NaiveReplayBuffer(4) if patched else None
    print(json.dumps({"patched": patched, "flash_attn_2": transformers.utils.is_flash_attn_2_available(),
                      "checked": check_symbols(),
                      "buffer_device": str(buffer.target_device) if buffer is not None else None,
                      "rollout_actor": vllm_engine.RolloutRayActor.__ray_actor_class__.__name__}))
    """
)


def _probe(code: str, flag: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != cpu.ENV_FLAG}
    env["PYTHONPATH"] = os.pathsep.join([str(cpu.SITE), *filter(None, [os.environ.get("PYTHONPATH")])])
    if flag:
        env.update(cpu.cpu_environment())
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)


def _facts(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_off_without_the_flag_even_with_its_folder_on_the_path():
    facts = _facts(_probe(PROBE, flag=False))
    assert facts["patched"] == [] and facts["rollout_actor"] == "RolloutRayActor"
    assert facts["flash_attn_2"] is False  # the stand-in has no distribution: transformers sees no flash-attn


def test_the_flag_patches_every_listed_symbol_when_its_module_loads():
    facts = _facts(_probe(PROBE, flag=True))
    assert facts["patched"] == [p.attribute for p in upstream.PATCHES]
    assert len(facts["checked"]) == len(upstream.PATCHES) + len(upstream.RELIED_ON)  # all exist in the pins
    assert facts["buffer_device"] == "cpu" and facts["rollout_actor"] == "CPURolloutRayActor"
    assert facts["flash_attn_2"] is False


def test_it_refuses_where_cuda_is_available():
    out = _probe(
        "import torch; torch.cuda.is_available = lambda: True\nimport openrlhf.utils.distributed_util", flag=True
    )
    assert out.returncode != 0
    assert f"CUDA is available here: unset {cpu.ENV_FLAG}" in out.stderr


def test_ring_attentions_flash_attn_stand_in_raises_when_used():
    """Only ring attention needs flash-attn's kernels; its all_gather says so instead of failing obscurely."""
    out = _probe("from flash_attn.utils.distributed import all_gather\nall_gather(None)", flag=False)
    assert out.returncode != 0 and "flash-attn is not installed" in out.stderr


def test_an_openrlhf_it_was_not_written_for_is_refused(monkeypatch):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "0.11.3" if d == "openrlhf" else real(d))
    with pytest.raises(RuntimeError, match=r"written against openrlhf==0\.11\.2, found 0\.11\.3"):
        upstream.check_versions()


def test_a_missing_symbol_is_named():
    import types

    with pytest.raises(RuntimeError, match="openrlhf_fake.ActorPPOTrainer.broadcast_to_vllm is missing"):
        patch = next(p for p in upstream.PATCHES if p.attribute == "ActorPPOTrainer.broadcast_to_vllm")
        upstream.apply(patch, types.ModuleType("openrlhf_fake"))


def test_a_hook_runs_after_its_module_executes_and_keeps_the_source(tmp_path, monkeypatch):
    import inspect

    (tmp_path / "sat_ext_hooked_mod.py").write_text("VALUE = 1\n\ndef f():\n    return VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hooks.when_imported("sat_ext_hooked_mod", lambda m: seen.append(m.VALUE))
    assert seen == []
    module = importlib.import_module("sat_ext_hooked_mod")
    assert seen == [1] and "return VALUE" in inspect.getsource(module.f)
    hooks.when_imported("sat_ext_hooked_mod", lambda m: seen.append(2))  # already imported: at once
    assert seen == [1, 2]


def test_weights_are_written_whole_then_renamed(tmp_path, monkeypatch):
    import torch

    from sat_ext.openrlhf.cpu import weights

    monkeypatch.setattr(weights, "_folder", lambda: tmp_path)
    state = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.ones(4, dtype=torch.bfloat16)}
    path = weights.write_weights(state)
    assert path.name.startswith(weights.FILE_PREFIX) and [p.name for p in tmp_path.iterdir()] == [path.name]
    loaded = torch.load(path, weights_only=True)
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)


def test_the_cpu_bert_padding_unpads_and_pads_back():
    """The CPU setup's plain-torch flash_attn.bert_padding, on sample packing's path: unpad then pad is the
    identity on the mask's tokens, zeros elsewhere, and gradients flow back through pad_input."""
    import importlib.util

    import torch

    from sat_ext.openrlhf.cpu import SITE

    spec = importlib.util.spec_from_file_location("cpu_bert_padding", SITE / "flash_attn" / "bert_padding.py")
    bert = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bert)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    hidden = torch.randn(3, 4, 5, requires_grad=True)
    tokens, indices, cu_seqlens, longest, used = bert.unpad_input(hidden, mask)
    assert (
        tokens.shape == (9, 5) and cu_seqlens.tolist() == [0, 3, 5, 9] and longest == 4 and used.tolist() == [3, 2, 4]
    )
    back = bert.pad_input(tokens, indices, 3, 4)
    torch.testing.assert_close(back, hidden * mask[..., None])
    back.sum().backward()
    torch.testing.assert_close(hidden.grad, mask[..., None].expand(3, 4, 5).float())
    assert torch.equal(bert.index_first_axis(hidden.detach().reshape(12, 5), indices), tokens.detach())
