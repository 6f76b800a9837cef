"""Rule reward for the OpenRLHF AIME example: 1.0 if the response's final answer equals the label, else 0.0.

OpenRLHF loads this file from ``--reward.remote_url <path>.py`` in its vLLM actors and calls
``reward_func(queries, prompts, labels)`` (one query per call in 0.11.2); ``queries`` are prompt + response
decoded with special tokens. The prompts are DAPO's instruction ("... The last line of your response should
be of the form Answer: $Answer ..."), so the answer is read like verl's ``math_dapo`` scorer reads it: the
last ``Answer:`` in the final 300 characters, else the last ``\\boxed{...}``. Rewards are 0/1 rather than
math_dapo's -1/+1 so that OpenRLHF's eval metric ``eval_<datasource>_pass1`` (the mean reward over the
``--eval.n_samples_per_prompt`` samples) is the avg@k accuracy; group_norm advantages are the same for both.

Only the standard library: it runs in every vLLM actor.
"""

from __future__ import annotations

import re

TAIL_CHARS = 300  # as math_dapo: the longest MATH-500 answer is 159 characters
_SPECIAL = re.compile(r"<\|[^|>]*\|>|</s>|<eos>")
_ANSWER = re.compile(r"Answer\s*:\s*([^\n]*)", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def extract_answer(response: str) -> str | None:
    """The final answer of a response: the last ``Answer:`` line, else the last ``\\boxed{}``; None if neither."""
    tail = _SPECIAL.sub("", response)[-TAIL_CHARS:]
    found = _ANSWER.findall(tail)
    if found and found[-1].strip():
        return found[-1].strip()
    return _last_boxed(tail)


def normalize(answer: str) -> str:
    """Light normalisation: boxed/text wrappers, $, spaces, thousands separators, a trailing period, degrees."""
    s = answer.strip()
    boxed = _last_boxed(s)
    if boxed is not None:
        s = boxed
    s = re.sub(r"\\text\{([^}]*)\}", r"\1", s)
    s = s.replace("$", "").replace("\\left", "").replace("\\right", "").replace("\\!", "")
    s = s.replace("^\\circ", "").replace("^{\\circ}", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"\s+", "", s).rstrip(".")
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s


def is_correct(response: str, label: str) -> bool:
    pred = extract_answer(response)
    if pred is None:
        return False
    a, b = normalize(pred), normalize(str(label))
    if a == b:
        return True
    if _NUMBER.match(a) and _NUMBER.match(b):
        return float(a) == float(b)
    return False


def _response(query: str, prompt: str) -> str:
    return query[len(prompt):] if query.startswith(prompt) else query


def reward_func(queries, prompts, labels, **kwargs):
    """OpenRLHF's reward hook: ``{"rewards", "scores", "extra_logs"}``, floats for one query, lists otherwise."""
    acc = [1.0 if is_correct(_response(q, p), l) else 0.0 for q, p, l in zip(queries, prompts, labels)]
    if len(acc) == 1:
        return {"rewards": acc[0], "scores": acc[0], "extra_logs": {"acc": acc[0]}}
    return {"rewards": acc, "scores": acc, "extra_logs": {"acc": acc}}
