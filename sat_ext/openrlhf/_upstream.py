"""Every private OpenRLHF 0.11.2 member (and argparse internal) sat_ext's OpenRLHF adapter uses, in one place.

The rest of the adapter reaches them only through the functions below. :data:`PRIVATE` lists each (module,
qualified name, what sat_ext does with it); :func:`check` checks the installed OpenRLHF version and every entry,
raising naming the first one missing (an OpenRLHF bump must fail here, not halfway through a run). It runs when
the launcher starts (:func:`sat_ext.openrlhf.train_ppo_ray.main`) and when the lag actors are built; importing
this module imports no OpenRLHF code (OpenRLHF's trainer modules need its GPU dependencies, or the CPU setup).
``sat-ext doctor`` lists :func:`names`. The CPU setup's patches have their own list in
:mod:`sat_ext.openrlhf.cpu.upstream`. The launcher's process-wide hooks (``argparse.ArgumentParser.parse_args``
while OpenRLHF's CLI parses, and the ``train`` in its ``__main__`` namespace) are public Python names and live in
:mod:`sat_ext.openrlhf.train_ppo_ray`; where OpenRLHF gains a hook, a patch under patches/ is the long-term route
(as patches/openrlhf-0.11.2-policy-loss-registry.diff already is for the loss).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sat_ext.pinned import OPENRLHF_PINS, Private, check_private

_PTA = "openrlhf.trainer.ppo_trainer_async"
_SG = "openrlhf.trainer.ppo_utils.samples_generator"


PRIVATE = (
    Private(_SG, "SamplesGenerator._generate_vllm", "wrapped per generator: version tags, regenerated prompts"),
    Private(_SG, "SamplesGenerator.generate_samples:_dataloader_iter", "read: whether a call draws training prompts"),
    Private(_PTA, "GenerateSamplesActor.__init__:_partial_rollout", "read: whether fit holds the vLLM lock"),
    Private(_PTA, "PPOTrainerAsync.__init__:GenerateSamplesActor", "rebound in that function's globals during it"),
    Private(_PTA, "PPOTrainerAsync.__init__:TrainingActor", "rebound in that function's globals during it"),
    Private("argparse", "ArgumentParser._option_string_actions", "read: OpenRLHF's flags' actions by name"),
)


def check() -> list[str]:
    """Check the installed OpenRLHF version and every entry of :data:`PRIVATE`; returns their names."""
    return check_private(OPENRLHF_PINS, PRIVATE, "sat_ext's OpenRLHF adapter", "sat_ext/openrlhf/_upstream.py")


def names() -> list[str]:
    """``module.name`` of every private member the adapter uses."""
    return [f"{e.module}.{e.name}" for e in PRIVATE]


# --------------------------------------------------------------------------------------------- the seam


def option_action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    """The action of ``flag`` on ``parser`` (None when the parser has no such flag)."""
    return parser._option_string_actions.get(flag)


def wrap_generate_vllm(samples_generator: Any, wrap: Callable[[Callable], Callable]) -> None:
    """Replace this generator's ``_generate_vllm`` (the call that generates one batch) by ``wrap(original)``."""
    samples_generator._generate_vllm = wrap(samples_generator._generate_vllm)


def training_prompts(samples_generator: Any) -> Any:
    """The generator's iterator over training prompts (None before its first training batch)."""
    return getattr(samples_generator, "_dataloader_iter", None)


def partial_rollout(generator_actor: Any) -> bool:
    """Whether OpenRLHF's generator runs partial rollout (then its fit does not hold the vLLM lock)."""
    return generator_actor._partial_rollout


@contextlib.contextmanager
def actor_classes_bound(init: Callable, classes: Mapping[str, Any]) -> Iterator[None]:
    """While the body runs, the names in ``classes`` (``GenerateSamplesActor``, ``TrainingActor``) resolve to the
    given objects inside ``PPOTrainerAsync.__init__`` (``init``), through that function's globals."""
    names = init.__globals__
    saved = {name: names[name] for name in classes}
    names.update(classes)
    try:
        yield
    finally:
        names.update(saved)
