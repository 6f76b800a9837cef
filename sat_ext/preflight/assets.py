"""What the targets of one preflight share, built once under ``<out>/assets``: the data rows and the tiny models.

Data (:mod:`sat_ext.preflight.data`): the config's own files where every one exists (their first
:data:`ROW_LIMIT` rows), else the shipped sample. The tiny model (:mod:`sat_ext.tiny_model`): one per
architecture family and data, its tokenizer trained on those rows' prompts and answers, warm-started on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sat_ext.tiny_model import ANSWER_FORMAT, BuiltModel, TinyShape, longest_prompt, write_tiny_model

from .data import DataRow, read_jsonl_rows, read_parquet_rows, sample_files

ROW_LIMIT = 512  # rows of a config's own data files the preflight reads
ROLE_WORDS = ["user", "assistant", "system"]


@dataclass(frozen=True)
class Data:
    """The rows a run uses: training and validation, where they come from, and why."""

    train: list[DataRow]
    val: list[DataRow]
    origin: str  # "config" or "sample"
    why: str


@dataclass
class Assets:
    """Data and models shared by the targets of one preflight, built on first use under ``folder``."""

    folder: Path
    models: dict[tuple[str, str, TinyShape], tuple[BuiltModel, int]] = field(default_factory=dict)

    def sample(self) -> Path:
        return sample_files(self.folder / "sample")

    def data(self, files: tuple[list[Path], list[Path]] | None, prompt_key: str, layout: str = "verl") -> Data:
        """The config's files (their first :data:`ROW_LIMIT` rows) when given, else the shipped sample; ``layout``:
        verl's parquet rows or OpenRLHF's JSON lines."""
        read = read_parquet_rows if layout == "verl" else read_jsonl_rows
        if files is not None:
            train, val = (read(group, prompt_key)[:ROW_LIMIT] for group in files)
            return Data(train, val, "config", f"the config's files, their first {ROW_LIMIT} rows")
        sample = self.sample()
        names = (
            ("train.parquet", "aime2024.parquet")
            if layout == "verl"
            else ("openrlhf/train.jsonl", "openrlhf/aime2024.jsonl")
        )
        why = "the config's files do not exist here: the shipped sample rows, in the same layout"
        return Data(read([sample / names[0]], prompt_key), read([sample / names[1]], prompt_key), "sample", why)

    def model(self, family: str, data: Data, shape: TinyShape = TinyShape()) -> tuple[BuiltModel, int]:
        """The tiny ``family`` model of ``shape`` for ``data`` and the data's longest prompt in its tokens (built
        once)."""
        key = (family, data.origin, shape)
        if key not in self.models:
            rows = data.train + data.val
            texts = ROLE_WORDS * 4 + [m["content"] for r in rows for m in r.messages]
            texts += [ANSWER_FORMAT.format(a) for r in rows for a in r.answers]
            folder = self.folder / f"model_{family}_{data.origin}_{len(self.models)}"
            built = write_tiny_model(folder, family, texts, [r.example() for r in rows], shape)
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(built.folder)
            self.models[key] = built, longest_prompt(tokenizer, [r.messages for r in rows])
        return self.models[key]
