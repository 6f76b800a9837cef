"""OpenRLHF's own per-step logs as the smoke's ``metrics.jsonl``: the scalars its TensorBoard logger wrote.

OpenRLHF 0.11.2 hands each global step's status dict to its loggers (``--logger.tensorboard_dir``: one
``train/<name>`` scalar per key at that step; wandb the same); nothing else writes a file per step. The smoke
turns those events into verl's file-logger layout, one ``{"step": N, "data": {...}}`` line per step, keeping
OpenRLHF's metric names (the logger's ``train/`` prefix dropped: the names of its console line, e.g.
``sat_gate_rate``, ``lag/max``). TensorBoard stores scalars as float32; each is written as the shortest
decimal that reads back as that float32 (0.001, not 0.0010000000474974513).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from sat_ext.runlog import RunLogError

PREFIXES = ("train/",)


def read_scalars(folder: Path, prefixes: tuple[str, ...] = PREFIXES) -> dict[int, dict[str, float]]:
    """``{step: {name: value}}`` of the tags under ``prefixes`` (each prefix dropped from the name) from every event
    file under ``folder``; a name logged twice at one step raises."""
    import numpy as np
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    steps: dict[int, dict[str, float]] = {}
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                prefix = next((p for p in prefixes if value.tag.startswith(p)), None)
                if value.metadata.plugin_data.plugin_name != "scalars" or prefix is None:
                    continue
                name, data = value.tag[len(prefix) :], steps.setdefault(event.step, {})
                if name in data:
                    raise RunLogError(f"{path}: {name} logged twice at step {event.step}")
                data[name] = float(str(np.float32(tensor_util.make_ndarray(value.tensor).item())))
    return steps


def write_metrics(folder: Path, path: Path, prefixes: tuple[str, ...] = PREFIXES) -> int:
    """The scalars under ``folder`` (tags under ``prefixes``) as JSON lines at ``path`` (NaN and Inf as null, as
    verl's file logger writes them), in step order; returns the number of steps."""
    steps = read_scalars(folder, prefixes)
    with open(path, "w") as out:
        for step in sorted(steps):
            data = {k: (v if math.isfinite(v) else None) for k, v in sorted(steps[step].items())}
            out.write(json.dumps({"step": step, "data": data}) + "\n")
    return len(steps)
