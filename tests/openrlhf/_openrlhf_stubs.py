"""Import-time stand-ins for OpenRLHF's GPU-only dependencies (vllm, deepspeed, flash_attn); tests only.

OpenRLHF's CLI module (``openrlhf.cli.train_ppo_ray``) and Ray actor module (``trainer/ray/ppo_actor.py``)
import these at module level, and none of them installs on a CPU machine. These are exactly the names
those imports bind (found by tracing the imports of openrlhf 0.11.2); using any of them raises. Nothing
here stands in for OpenRLHF or Ray. Installed only for a package that is not importable, and only in a
process that needs OpenRLHF's trainer stack (a test subprocess and its Ray workers, never pytest's own).
"""

import importlib.machinery
import importlib.util
import sys
import types

_NAMES = {
    "vllm": ["SamplingParams"],
    "vllm.inputs": ["TokensPrompt"],
    "vllm.utils": ["random_uuid"],
    "deepspeed": [],
    "deepspeed.runtime": [],
    "deepspeed.runtime.zero": [],
    "deepspeed.runtime.zero.partition_parameters": ["ZeroParamStatus"],
    "flash_attn": [],
    "flash_attn.bert_padding": ["index_first_axis", "pad_input", "rearrange", "unpad_input"],
    "flash_attn.utils": [],
    "flash_attn.utils.distributed": ["all_gather"],
}


def _unavailable(qualified):
    def stub(*args, **kwargs):
        raise RuntimeError(f"{qualified} is a CPU-test stand-in (the package is not installed here)")

    stub.__qualname__ = qualified
    return stub


def install():
    """Register the stand-ins for each of vllm, deepspeed, flash_attn that cannot be imported."""
    roots = {name.split(".")[0] for name in _NAMES}
    missing = {r for r in roots if r not in sys.modules and importlib.util.find_spec(r) is None}
    for name, attrs in _NAMES.items():
        if name.split(".")[0] not in missing:
            continue
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module.__path__ = []
        for attr in attrs:
            setattr(module, attr, _unavailable(f"{name}.{attr}"))
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
