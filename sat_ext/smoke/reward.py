"""The smoke runs' reward: the share of the response's characters that are digits of the right answer, so rewards
vary within a group of random-model samples (GRPO advantages are not 0).

Two entry points around one rule (:func:`compute_score`): verl's custom-reward signature, and OpenRLHF's
``reward_func(queries, prompts, labels)`` (``--reward.remote_url`` this file), whose queries are prompt and
response decoded with special tokens by the smoke tokenizer, which puts a space between tokens
(:func:`sat_ext.smoke.assets.response_text` takes the response back out).
"""

from __future__ import annotations


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """Fraction of ``solution_str``'s characters that occur in ``ground_truth`` (0 for an empty response)."""
    if not solution_str:
        return 0.0
    return sum(ch in ground_truth for ch in solution_str) / len(solution_str)


def reward_func(queries: list[str], prompts: list[str], labels: list[str]) -> dict:
    """OpenRLHF's reward hook: ``{"rewards", "scores", "extra_logs"}``, floats for one query (OpenRLHF 0.11.2
    asks one at a time), lists otherwise."""
    from sat_ext.smoke.assets import DATA_SOURCE, response_text

    scores = [compute_score(DATA_SOURCE, response_text(q), label) for q, label in zip(queries, labels, strict=True)]
    value = scores[0] if len(scores) == 1 else scores
    return {"rewards": value, "scores": value, "extra_logs": {}}
