"""Policy-version tags on OpenRLHF rollout samples (``Experience.info``), their spans, lengths and prompt groups, and
the sample as the per-token lag metrics see it (:func:`_trajectory`)."""

from __future__ import annotations

from sat_ext.lag.turns import Trajectory, Turn
from sat_ext.lag.versions import VersionSpan

VERSION_KEY = "policy_version"
NEWEST_KEY = "policy_version_newest"
GENERATED_KEY = "sat_ext_generated_tokens"
"""An agent's count of the tokens it generated in an episode (all its turns), which it reports in its final
``extra_logs`` (OpenRLHF copies those into ``Experience.info``: samples_generator.py:289-293)."""


def _tag(experiences, oldest: int, newest: int | None) -> None:
    import torch

    for experience in experiences:
        experience.info[VERSION_KEY] = torch.tensor([float(oldest)])
        if newest is not None:
            experience.info[NEWEST_KEY] = torch.tensor([float(newest)])


def _span(samples) -> VersionSpan:
    oldest = min(int(s.info[VERSION_KEY].min().item()) for s in samples)
    newest = max(int(s.info[NEWEST_KEY if NEWEST_KEY in s.info else VERSION_KEY].max().item()) for s in samples)
    return VersionSpan(oldest, newest)


def _response_tokens(sample) -> int:
    """Generated tokens of one rollout sample (OpenRLHF's ``Experience.response_length``; 0 if absent)."""
    length = getattr(sample, "response_length", None)
    return int(length.sum().item()) if length is not None else 0


def _prompt_groups(samples, n: int) -> list[list]:
    """The rollout's prompt groups: OpenRLHF generates the n samples of a prompt together, contiguously."""
    if len(samples) % n:
        raise ValueError(f"{len(samples)} rollout samples are not whole groups of --rollout.n_samples_per_prompt {n}")
    groups = [samples[i : i + n] for i in range(0, len(samples), n)]
    for group in groups:
        if len({p for s in group for p in s.prompts}) != 1:
            raise ValueError("a rollout prompt group mixes prompts: cannot drop or regenerate it as a whole")
    return groups


def _trajectory(sample) -> Trajectory:
    """One rollout sample for :class:`sat_ext.lag.turns.TokenLagMetrics`: its loss tokens (``action_mask`` ones)
    and version tags, and, where its agent reported :data:`GENERATED_KEY`, one turn of that many tokens at those
    tags. One turn is exact: OpenRLHF generates every turn of a sample inside one rollout call, on the versions its
    tags span (one version unless partial rollout is on), so each of its tokens has the sample's lag. The
    metrics' ``token_unrecorded`` is then the difference between the loss tokens and the generated ones: tool
    observations left in the action mask."""
    span = _span([sample])
    generated = sample.info.get(GENERATED_KEY)
    turns = None if generated is None else (Turn(int(generated.sum().item()), span),)
    return Trajectory(turns, int(sample.action_mask.sum().item()), span)
