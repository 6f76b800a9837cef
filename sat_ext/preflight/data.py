"""The data a preflight runs on: the config's own files where they exist, else the shipped sample in the same
layout (``examples/data/prepare_aime_dapo.py --sample``), so the dataset class and the reward function run on
real rows; and the prompts and answers the tiny model is warm-started on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sat_ext.example_configs import examples_root
from sat_ext.tiny_model import Example

from .verl_target import PreflightError


@dataclass(frozen=True)
class DataRow:
    """One prompt row: its data source, chat messages, accepted answers, ``extra_info``, and the row as read."""

    source: str
    messages: list[dict]
    answers: tuple[str, ...]
    extra_info: dict
    record: dict

    def example(self) -> Example:
        return Example(self.messages, self.answers[0])


def sample_files(folder: Path) -> Path:
    """The shipped sample rows written by the data script into ``folder`` (verl's ``train.parquet`` and
    ``aime2024.parquet``, OpenRLHF's ``openrlhf/*.jsonl``); returns ``folder``. Written once per folder."""
    if not (folder / "train.parquet").exists():
        script = examples_root() / "data" / "prepare_aime_dapo.py"
        proc = subprocess.run(
            [sys.executable, str(script), "--out-dir", str(folder), "--sample"], capture_output=True, text=True
        )
        if proc.returncode:
            raise RuntimeError(f"{script} --sample failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return folder


def _files(value) -> list[Path]:
    return [Path(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if v]


def verl_files(train, val) -> tuple[list[Path], list[Path]] | None:
    """The config's ``data.train_files`` / ``data.val_files`` (resolved) if every one exists, else None."""
    files = (_files(train), _files(val))
    return files if all(p.is_file() for group in files for p in group) and files[0] else None


def read_parquet_rows(paths: list[Path], prompt_key: str = "prompt") -> list[DataRow]:
    """verl RL rows: ``data_source``, the chat list under ``prompt_key``, ``reward_model.ground_truth`` and
    ``extra_info.answers`` where present."""
    import pandas as pd

    rows = []
    for path in paths:
        for _, row in pd.read_parquet(path).iterrows():
            extra = dict(row.get("extra_info") or {})
            truth = row["reward_model"]["ground_truth"]
            answers = [str(a) for a in extra.get("answers", [])] or [str(truth)]
            if str(truth) not in answers:
                answers.insert(0, str(truth))
            messages = [dict(m) for m in row[prompt_key]]
            rows.append(DataRow(str(row.get("data_source", "")), messages, tuple(answers), extra, row.to_dict()))
    if not rows:
        raise PreflightError(f"data files {[str(p) for p in paths]} hold no rows")
    return rows


def read_jsonl_rows(paths: list[Path], prompt_key: str = "prompt", label_key: str = "label") -> list[DataRow]:
    """OpenRLHF prompt rows: the chat list (or text) under ``prompt_key``, the answer (or list of answers) under
    ``label_key``, ``datasource``."""
    rows = []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            prompt, label = row[prompt_key], row[label_key]
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
            answers = tuple(str(a) for a in (label if isinstance(label, list) else [label]))
            rows.append(DataRow(str(row.get("datasource", "")), messages, answers, {}, row))
    if not rows:
        raise PreflightError(f"data files {[str(p) for p in paths]} hold no rows")
    return rows


def write_rows(rows: list[DataRow], dest: Path, count: int) -> int:
    """``count`` rows, ``rows`` as they were read (every column) cycled in order, written to ``dest`` (parquet for a
    ``.parquet`` file, else JSON lines); returns ``count``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    records = [rows[i % len(rows)].record for i in range(count)]
    if dest.suffix == ".parquet":
        import pandas as pd

        pd.DataFrame(records).to_parquet(dest)
    else:
        dest.write_text("".join(json.dumps(r) + "\n" for r in records))
    return count
