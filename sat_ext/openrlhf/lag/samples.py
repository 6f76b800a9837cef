"""Policy-version tags on OpenRLHF rollout samples (``Experience.info``), their spans, lengths and prompt groups."""

from __future__ import annotations

from sat_ext.lag.versions import VersionSpan

VERSION_KEY = "policy_version"
NEWEST_KEY = "policy_version_newest"


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
