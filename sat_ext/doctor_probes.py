"""What ``sat-ext doctor`` runs inside a fresh interpreter and on each Ray node; each probe returns plain data.

Run as ``python -m sat_ext.doctor_probes`` (prints one JSON line): verl is imported first with its plugin
log made visible, as a user's process would import it. :func:`node_report` is the task pinned to each Ray
node (it needs sat_ext installed there, which is itself what it checks).
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import traceback
from collections.abc import Callable
from typing import Any

from sat_ext.pinned import LOSS_NAMES


def _guard(fn: Callable[[], Any]) -> dict[str, Any]:
    """``{"ok": True, "detail": fn()}`` or ``{"ok": False, "detail": <the exception's last line>}``."""
    try:
        return {"ok": True, "detail": fn()}
    except Exception as e:  # the doctor reports any failure, it never raises
        return {"ok": False, "detail": f"{type(e).__name__}: {e}".splitlines()[0], "traceback": traceback.format_exc()}


def registered_losses() -> list[str]:
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    return sorted(n for n in LOSS_NAMES if n in POLICY_LOSS_REGISTRY)


def _verl_config_dir() -> str:
    import os

    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def target_conversion() -> str:
    """The SAT ``_target_`` through verl's own config conversion (what every worker's ``init_model`` does)."""
    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    from sat_ext.verl.config import SATPolicyLossConfig

    pl = "actor_rollout_ref.actor.policy_loss"
    overrides = [
        f"{pl}._target_=sat_ext.verl.config.SATPolicyLossConfig",
        f"{pl}.loss_mode=sat",
        f"+{pl}.sat_quantile=0.9",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    ]
    with initialize_config_dir(config_dir=_verl_config_dir(), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    if not isinstance(actor.policy_loss, SATPolicyLossConfig):
        raise TypeError(f"policy_loss converted to {type(actor.policy_loss).__name__}, not SATPolicyLossConfig")
    return "SATPolicyLossConfig with loss_mode=sat"


def lag_stack() -> str:
    """verl's V1 trainer stack with TransferQueue, sat_ext's sampler and its trainer mode."""
    import transfer_queue  # noqa: F401
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    from sat_ext.verl.lag import sampler, trainer  # noqa: F401
    from sat_ext.verl.lag.overrides import TRAINER_MODE

    return f"{get_trainer_cls(TRAINER_MODE).__name__} ({TRAINER_MODE}), {sampler.SATLagReplayBuffer.__name__}"


def private_names(framework: str) -> dict[str, Any]:
    """The private upstream members sat_ext's adapter for ``framework`` uses (its ``_upstream.py``), checked
    against the installed version; OpenRLHF's are only listed where its trainer modules cannot be imported."""
    import importlib

    upstream = importlib.import_module(f"sat_ext.{framework}._upstream")
    try:
        return {"checked": True, "names": upstream.check()}
    except ImportError as e:  # OpenRLHF's trainer needs its GPU dependencies (flash-attn, DeepSpeed)
        return {"checked": False, "names": upstream.names(), "why": f"{type(e).__name__}: {e}"}


def example_configs() -> str:
    """Every shipped verl example variant composes, passes sat_ext's lag check, and its actor converts."""
    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    from sat_ext.example_configs import config_dir, variants
    from sat_ext.verl.lag.overrides import check_verl_config

    name = "verl_aime_qwen3_30b"
    found, config = variants(name), config_dir(name)
    if not found:
        raise FileNotFoundError(f"no example variants in {config}")
    with initialize_config_dir(config_dir=str(config), version_base=None):
        for variant in found:
            cfg = compose(config_name=variant)
            check_verl_config(cfg)
            omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    return f"{len(found)} variants in {config}"


def fresh_process_report() -> dict[str, Any]:
    """All in-process probes, after ``import verl`` with its plugin errors captured."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setLevel(logging.DEBUG)
    verl_log = logging.getLogger("verl")
    verl_log.addHandler(handler)
    verl_log.setLevel(logging.DEBUG)
    out: dict[str, Any] = {"import_verl": _guard(lambda: __import__("verl").__version__)}
    if not out["import_verl"]["ok"]:
        return out
    out["registered"] = _guard(registered_losses)
    out["plugin_errors"] = [line for line in buf.getvalue().splitlines() if "Failed to load plugin" in line]
    out["target_conversion"] = _guard(target_conversion)
    out["lag_stack"] = _guard(lag_stack)
    out["example_configs"] = _guard(example_configs)
    out["verl_private"] = _guard(lambda: private_names("verl"))
    if importlib.util.find_spec("openrlhf") is not None:
        out["openrlhf_private"] = _guard(lambda: private_names("openrlhf"))
    return out


def node_report() -> dict[str, Any]:
    """On one Ray node: host, versions, and whether ``import verl`` registers the losses there."""
    import importlib.metadata as md
    import importlib.util
    import socket

    def version(pkg: str) -> str | None:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    return {
        "host": socket.gethostname(),
        "sat-ext": version("sat-ext"),
        "verl": version("verl"),
        "transfer_queue": importlib.util.find_spec("transfer_queue") is not None,
        "registered": _guard(registered_losses),
    }


def training_node_report() -> dict[str, Any]:
    """The GPU training stack of the examples: CUDA, Megatron-core, mbridge, SGLang."""
    import importlib.metadata as md

    def version(pkg: str) -> dict[str, Any]:
        return _guard(lambda: md.version(pkg))

    import torch

    return {
        "cuda": {
            "ok": torch.cuda.is_available(),
            "detail": f"{torch.cuda.device_count()} GPU(s), torch {torch.__version__}",
        },
        "megatron-core": version("megatron-core"),
        "mbridge": version("mbridge"),
        "sglang": version("sglang"),
    }


if __name__ == "__main__":
    import sys

    report = training_node_report() if sys.argv[1:] == ["--training-node"] else fresh_process_report()
    print(json.dumps(report))
