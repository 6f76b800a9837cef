"""The smoke runs' reward, in verl's custom-reward signature: the share of the response's characters that are
digits of the right answer, so rewards vary within a group of random-model samples (GRPO advantages are not 0)."""

from __future__ import annotations


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """Fraction of ``solution_str``'s characters that occur in ``ground_truth`` (0 for an empty response)."""
    if not solution_str:
        return 0.0
    return sum(ch in ground_truth for ch in solution_str) / len(solution_str)
