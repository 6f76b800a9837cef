"""What a preflight run must show beyond the smoke's rows (:mod:`sat_ext.smoke.checks`) and the run-log checker's
(:func:`sat_ext.runlog.check_run`):

- ``reward``: every rollout the framework dumped was scored by the config's own reward function against its
  row's ground truth: the dumped ground truth is the data row's, the config's function re-scores the dumped
  response to the dumped score, and some samples score 1 and some 0 (the group has something to learn);
- ``batches``: one optimizer step per batch of the config's size: each logged step trained ``sync_every`` batches
  of ``prompts x samples`` trajectories, nothing dropped (``lag/consumed``), and the trainer step advanced by
  ``sync_every`` (``lag/trainer_step``);
- ``loss``: the config's loss is registered in the framework and its loss is finite on every step.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
from collections.abc import Callable
from pathlib import Path

from sat_ext.runlog import CheckResult, Record

from .data import DataRow


def load_function(path: str, name: str) -> Callable:
    """``name`` from ``path``: ``pkg://a.b`` (a module) or a file, as verl's ``custom_reward_function`` reads it."""
    if path.startswith("pkg://"):
        return getattr(importlib.import_module(path[len("pkg://") :]), name)
    spec = importlib.util.spec_from_file_location("sat_ext_preflight_reward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _dumped(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines() if line]


def _row_of(text: str, rows: list[DataRow]) -> DataRow | None:
    """The data row whose prompt is in the decoded prompt ``text`` (the longest match)."""
    found = [r for r in rows if r.messages and r.messages[-1]["content"] in text]
    return max(found, key=lambda r: len(r.messages[-1]["content"]), default=None)


def check_reward(folder: Path, rows: list[DataRow], score: Callable) -> CheckResult:
    """verl's rollout dump (``trainer.rollout_data_dir``: input, output, gts, score per trajectory) against the
    data and the config's reward function ``score(data_source, solution_str, ground_truth, extra_info)``."""
    dumped = _dumped(folder)
    if not dumped:
        return CheckResult("reward", False, f"no rollout dumped under {folder}")
    problems, scores = [], []
    for item in dumped:
        row = _row_of(item["input"], rows)
        if row is None:
            problems.append(f"a prompt not in the data: {item['input'][:60]!r}")
            continue
        if str(item["gts"]) not in row.answers:
            problems.append(f"ground truth {item['gts']!r}, the data row's is {row.answers}")
        again = float(score(row.source, item["output"], item["gts"], row.extra_info))
        if not math.isclose(again, float(item["score"]), abs_tol=1e-6):
            problems.append(f"score {item['score']} for {item['output'][:40]!r}, the reward function gives {again}")
        scores.append(float(item["score"]))
    varied = len(set(scores)) > 1
    detail = (
        f"{len(dumped)} dumped trajectories of {len({d['input'] for d in dumped})} prompts re-scored against the data: "
        f"scores {sorted(set(scores))[:6]}, mean {sum(scores) / max(1, len(scores)):.3f}"
    )
    if problems:
        detail += f"; {len(problems)} wrong, e.g. {problems[0]}"
    elif not varied:
        detail += "; every sample scored the same: no advantage to learn from"
    return CheckResult("reward", not problems and varied, detail)


def check_batches(records: list[Record], sync_every: int, per_batch: int) -> CheckResult:
    """Each logged step: ``sync_every`` batches of ``per_batch`` trajectories trained, and the trainer step
    ``step * sync_every``."""
    bad = []
    for r in records:
        consumed, trainer_step = r.values.get("lag/consumed"), r.values.get("lag/trainer_step")
        if consumed != sync_every * per_batch or trainer_step != r.step * sync_every:
            bad.append(f"step {r.step}: lag/consumed {consumed}, lag/trainer_step {trainer_step}")
    detail = f"want {sync_every} optimizer step(s) of {per_batch} trajectories per logged step"
    return CheckResult("batches", not bad, f"{detail}; " + ("; ".join(bad[:3]) if bad else f"{len(records)} steps so"))


def check_loss(records: list[Record], loss_mode: str, registered: Callable[[str], object], key: str) -> CheckResult:
    """``loss_mode`` resolves in the framework's registry (``registered`` raises if not) and ``key`` is finite
    on every step."""
    try:
        registered(loss_mode)
    except Exception as err:  # the framework's own error, shown as it is
        return CheckResult("loss", False, f"{loss_mode!r} is not registered: {err}")
    bad = [r.step for r in records if not math.isfinite(r.values.get(key, math.nan))]
    detail = f"{loss_mode!r} registered; {key} finite on {len(records) - len(bad)}/{len(records)} steps"
    return CheckResult("loss", not bad, detail)
