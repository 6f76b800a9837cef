"""Saving and loading the controller's state next to a trainer checkpoint (JSON, written atomically)."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

STATE_FORMAT = 1


def save_state(path: str, state: dict[str, Any]) -> None:
    """Write ``state`` (from ``LagController.state_dict()``) to ``path``; a crash mid-write leaves the old file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".lag_state.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"format": STATE_FORMAT, "state": state}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_state(path: str) -> dict[str, Any]:
    """Read a state written by :func:`save_state`."""
    with open(path) as f:
        doc = json.load(f)
    if doc.get("format") != STATE_FORMAT:
        raise ValueError(f"{path}: unknown lag state format {doc.get('format')!r} (expected {STATE_FORMAT})")
    return doc["state"]
