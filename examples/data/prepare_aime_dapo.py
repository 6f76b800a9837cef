#!/usr/bin/env python3
"""Build the training and validation files of the AIME examples (verl parquet, and OpenRLHF jsonl).

Sources (each a local file or directory of .parquet / .jsonl / .json files, or a Hugging Face Hub id that
is read with ``datasets.load_dataset`` when the machine has network):

* train: DAPO-Math-17k (``BytedTsinghua-SIA/DAPO-Math-17k``) and, as in the paper, Dolci-RL-Zero-Math
  (``allenai/Dolci-RL-Zero-Math-7B``; ``--dolci none`` leaves it out);
* validation: AIME 2024 (``BytedTsinghua-SIA/AIME-2024``).

Output in ``--out-dir``:

* ``train.parquet`` and ``aime2024.parquet`` in verl's RL format: ``data_source``, ``prompt`` (a chat list),
  ``ability``, ``reward_model.{ground_truth, style}``, ``extra_info.{index, source, split, answers}``
  (``answers``: every accepted answer of the row, read by the examples' reward); no ``__rollout_n__``: the
  number of samples per prompt is the config's (``rollout.n``, ``rollout.val_kwargs.n``);
* ``openrlhf/train.jsonl`` and ``openrlhf/aime2024.jsonl`` for OpenRLHF: ``prompt`` (chat list), ``label``
  (the list of accepted answers), ``datasource`` (``--data.input_key prompt --data.label_key label
  --data.apply_chat_template``);
* ``manifest.json``: row counts per source, what was removed and why, and the paper's count beside ours.

Processing (App. F: "the union of DAPO-Math-17k and Dolci-RL-Zero-Math-7B, with 30,712 prompts in total. We
use a chat template, rollout shuffling, and balanced sampling"):

* prompts: DAPO-Math's own (DAPO's "Answer:" instruction around the problem); Dolci's own text
  (``--dolci-template dapo`` wraps DAPO's instruction around it instead: not the paper's, which says nothing of
  rewriting prompts). The examples' verifier reads both ``Answer:`` and ``\\boxed{}`` answers;
* answers: a Dolci row's ``ground_truth`` is a list; a row with several answers is kept, and any of them
  scores as right (``extra_info.answers`` / the OpenRLHF label list);
* de-duplication within each source: the Hub AIME file repeats each of its 30 problems (32 times); the Hub DAPO
  file repeats its problems too. Rows with the same problem text are kept once (``--keep-train-dups`` keeps
  the training repeats); the same problem with two different answers in one source is an error. A problem
  in both DAPO-Math and Dolci is kept once per source, which is how the paper's union counts 30,712 (the two
  sets' sizes added); ``--dedup-across-sources`` keeps it once (not the paper's count);
* decontamination: training rows that contain an AIME 2024 problem's text are dropped;
* the counts: the manifest and the last line give ours beside the paper's 30,712;
* "balanced sampling" is not done here: read as slime's ``--balance-data`` (each batch's tokens balanced
  across data-parallel ranks), verl's V1 trainer does it for every batch (``_balance_batch``); rollout
  shuffling is verl's ``data.shuffle``;
* ``--sample`` reads the few synthetic rows under ``examples/data/sample/`` instead (for tests and a dry run;
  they are not AIME or DAPO problems and their data_source says so).

Examples::

    python examples/data/prepare_aime_dapo.py --out-dir ~/data/sat_aime          # from the Hub
    python examples/data/prepare_aime_dapo.py --out-dir ~/data/sat_aime \\
        --dapo /data/dapo-math-17k.parquet --aime /data/aime-2024.parquet --dolci none
    python examples/data/prepare_aime_dapo.py --out-dir /tmp/sat_aime_sample --sample
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

HERE = Path(__file__).resolve().parent
SAMPLE_DIR = HERE / "sample"

HUB_DAPO = "BytedTsinghua-SIA/DAPO-Math-17k"
HUB_AIME = "BytedTsinghua-SIA/AIME-2024"
HUB_DOLCI = "allenai/Dolci-RL-Zero-Math-7B"
SAMPLE_DAPO = SAMPLE_DIR / "dapo_math_17k.sample.jsonl"
SAMPLE_AIME = SAMPLE_DIR / "aime_2024.sample.jsonl"
SAMPLE_DOLCI = SAMPLE_DIR / "dolci_rl_zero_math.sample.jsonl"

# DAPO-Math-17k's instruction (the text around the problem in every row of the Hub file).
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
REWARD_STYLE = "rule-lighteval/MATH_v2"
TRAIN_DATA_SOURCE = "math_dapo"
EXPECTED_AIME_PROBLEMS = 30
PAPER_TRAIN_PROMPTS = 30712  # App. F


class DataError(ValueError):
    """The input does not look like what this script expects; the message says which file and row."""


# ------------------------------------------------------------------------------------------------ reading


def read_table(source: str | Path, split: str = "train") -> pd.DataFrame:
    """A local .parquet/.jsonl/.json file or directory of them, or a Hub dataset id (needs network)."""
    path = Path(str(source)).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".parquet", ".jsonl", ".json"))
        if not files:
            raise DataError(f"{path}: no .parquet/.jsonl/.json files in this directory")
        return pd.concat([read_table(f) for f in files], ignore_index=True)
    if path.is_file():
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        if path.suffix in (".jsonl", ".json"):
            return pd.read_json(path, lines=path.suffix == ".jsonl")
        raise DataError(f"{path}: unsupported file type (use .parquet, .jsonl or .json)")
    if "/" in str(source) and not str(source).startswith((".", "/", "~")):
        try:
            import datasets
        except ImportError as e:  # pragma: no cover - datasets ships with verl
            raise DataError(
                f"{source}: not a local path, and `datasets` is not installed to read it from the Hub"
            ) from e
        try:
            return datasets.load_dataset(str(source), split=split).to_pandas()
        except Exception as e:  # no network, unknown id, ...
            raise DataError(f"{source}: not a local path, and reading it from the Hub failed: {e}") from e
    raise DataError(f"{source}: no such file or directory")


# -------------------------------------------------------------------------------------------- normalising


def _plain(value: Any) -> Any:
    """numpy / pyarrow containers from parquet -> plain Python."""
    if hasattr(value, "tolist") and not isinstance(value, str):
        return value.tolist()
    return value


def _messages(value: Any) -> list[dict]:
    value = _plain(value)
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in value]
    raise DataError(f"prompt is neither a string nor a chat list: {value!r:.200}")


def _last_user(messages: list[dict]) -> str:
    users = [m["content"] for m in messages if m["role"] == "user"]
    if not users:
        raise DataError(f"chat has no user message: {messages!r:.200}")
    return users[-1]


def problem_text(prompt_text: str) -> str:
    """The problem inside DAPO's template (the whole text when it is not templated)."""
    text = prompt_text
    if text.startswith(DAPO_PREFIX):
        text = text[len(DAPO_PREFIX) :]
    if text.endswith(DAPO_SUFFIX):
        text = text[: -len(DAPO_SUFFIX)]
    return text.strip()


def dapo_prompt(problem: str) -> list[dict]:
    return [{"role": "user", "content": f"{DAPO_PREFIX}{problem.strip()}{DAPO_SUFFIX}"}]


def _answers(value: Any, where: str) -> tuple[str, ...]:
    """The accepted answers of a row: one value or a list of them (Dolci's ``ground_truth`` is a list)."""
    value = _plain(value)
    values = value if isinstance(value, list) else [value]
    answers = tuple(
        dict.fromkeys(
            str(v).strip()
            for v in values
            if v is not None and not (isinstance(v, float) and pd.isna(v)) and str(v).strip()
        )
    )
    if not answers:
        raise DataError(f"{where}: empty ground-truth answer ({value!r:.200})")
    return answers


def _key(problem: str) -> str:
    """Duplicate key of a problem: whitespace-insensitive."""
    return re.sub(r"\s+", " ", problem).strip()


def _verl_row(
    problem: str, prompt: list[dict], answers: tuple[str, ...], data_source: str, index: str, source: str, split: str
) -> dict:
    return {
        "data_source": data_source,
        "prompt": prompt,
        "ability": "MATH",
        "reward_model": {"ground_truth": answers[0], "style": REWARD_STYLE},
        "extra_info": {"index": index, "source": source, "split": split, "answers": list(answers)},
        "_problem": problem,
    }


def rows_from_dapo_format(df: pd.DataFrame, source: str, data_source: str, split: str, label: str) -> list[dict]:
    """Rows in the DAPO / verl layout (the DAPO-Math-17k and DAPO AIME-2024 files): prompt + reward_model.

    ``source`` names the input in error messages; ``label`` goes to ``extra_info.source``.
    """
    missing = {"prompt", "reward_model"} - set(df.columns)
    if missing:
        raise DataError(f"{source}: missing columns {sorted(missing)} (have {sorted(df.columns)})")
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        where = f"{source} row {i}"
        messages = _messages(rec["prompt"])
        problem = problem_text(_last_user(messages))
        reward_model = _plain(rec["reward_model"])
        if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
            raise DataError(f"{where}: reward_model has no ground_truth: {reward_model!r:.200}")
        answers = _answers(reward_model["ground_truth"], where)
        extra = _plain(rec.get("extra_info")) or {}
        index = str(extra.get("index", i)) if isinstance(extra, dict) else str(i)
        rows.append(_verl_row(problem, dapo_prompt(problem), answers, data_source, index, label, split))
    return rows


_QUESTION_COLUMNS = ("prompt", "messages", "problem", "question")
_ANSWER_COLUMNS = ("ground_truth", "answer", "label")


def rows_from_dolci(df: pd.DataFrame, source: str, template: str, label: str) -> list[dict]:
    """Rows of Dolci-RL-Zero-Math (open-instruct's RLVR layout: ``id``, ``prompt`` text, ``ground_truth`` a list of
    answers, ``dataset``) or a file like it.

    The question is the first of prompt / messages / problem / question that exists (a chat list gives its
    last user message); the answers the first of ground_truth / answer / label / reward_model.ground_truth
    (one or a list; every one is accepted). ``template="keep"``: the row's own text (the paper's);
    ``"dapo"``: DAPO's instruction around it.
    """
    if "reward_model" in df.columns and "prompt" in df.columns and not any(c in df.columns for c in _ANSWER_COLUMNS):
        return rows_from_dapo_format(df, source, TRAIN_DATA_SOURCE, "train", label)
    qcol = next((c for c in _QUESTION_COLUMNS if c in df.columns), None)
    acol = next((c for c in _ANSWER_COLUMNS if c in df.columns), None)
    if qcol is None or (acol is None and "reward_model" not in df.columns):
        raise DataError(
            f"{source}: cannot find a question column ({_QUESTION_COLUMNS}) and an answer column "
            f"({_ANSWER_COLUMNS} or reward_model.ground_truth); columns are {sorted(df.columns)}"
        )
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        where = f"{source} row {i}"
        question = _last_user(_messages(rec[qcol]))
        answers = _answers(rec[acol] if acol else _plain(rec["reward_model"])["ground_truth"], where)
        problem = problem_text(question)
        prompt = dapo_prompt(problem) if template == "dapo" else [{"role": "user", "content": question.strip()}]
        index = str(rec.get("id", rec.get("key", i)))
        rows.append(_verl_row(problem, prompt, answers, TRAIN_DATA_SOURCE, index, label, "train"))
    return rows


def dedup(rows: Iterable[dict], what: str) -> list[dict]:
    """First occurrence of each problem; the same problem with other answers is an error."""
    seen: dict[str, list[str]] = {}
    out = []
    for row in rows:
        key, answers = _key(row["_problem"]), row["extra_info"]["answers"]
        if key in seen:
            if seen[key] != answers:
                raise DataError(f"{what}: the problem {key[:120]!r} appears with answers {seen[key]!r} and {answers!r}")
            continue
        seen[key] = answers
        out.append(row)
    return out


def _dedup(rows: list[dict], what: str) -> tuple[list[dict], int]:
    kept = dedup(rows, what)
    return kept, len(rows) - len(kept)


def contains_any(problem: str, others: set[str]) -> bool:
    """``problem`` (whitespace-insensitive) is or contains one of ``others`` (keys from :func:`_key`)."""
    key = _key(problem)
    return any(other in key for other in others)


# ----------------------------------------------------------------------------------------------- writing


def _verl_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])


def _openrlhf_records(rows: list[dict]) -> list[dict]:
    return [{"prompt": r["prompt"], "label": r["extra_info"]["answers"], "datasource": r["data_source"]} for r in rows]


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def _train_rows(args: argparse.Namespace, dapo_src, dolci_src, tag: str) -> tuple[dict[str, list[dict]], dict]:
    """Each source's training rows, de-duplicated within the source unless --keep-train-dups."""
    read = {
        "dapo": lambda: rows_from_dapo_format(
            read_table(dapo_src), str(dapo_src), TRAIN_DATA_SOURCE, "train", f"dapo_math_17k{tag}"
        )
    }
    if str(dolci_src).lower() != "none":
        read["dolci"] = lambda: rows_from_dolci(
            read_table(dolci_src), str(dolci_src), args.dolci_template, f"dolci_rl_zero_math{tag}"
        )
    per_source, counts = {}, {"in": {}, "duplicates_removed": {}}
    for name, rows in ((name, fn()) for name, fn in read.items()):
        counts["in"][name] = len(rows)
        if not args.keep_train_dups:
            rows, removed = _dedup(rows, f"{name} (train)")
            counts["duplicates_removed"][name] = removed
        per_source[name] = rows
    return per_source, counts


def build(args: argparse.Namespace) -> dict:
    sample = args.sample
    dapo_src = args.dapo or (SAMPLE_DAPO if sample else HUB_DAPO)
    aime_src = args.aime or (SAMPLE_AIME if sample else HUB_AIME)
    dolci_src = args.dolci or (SAMPLE_DOLCI if sample else HUB_DOLCI)
    val_source = args.val_data_source or ("aime2024_sample" if sample else "aime2024")
    if not val_source.startswith("aime"):
        raise DataError(f"--val-data-source must start with 'aime' (the examples' metric names), got {val_source!r}")

    tag = "_sample" if sample else ""
    aime_rows = rows_from_dapo_format(read_table(aime_src), str(aime_src), val_source, "test", f"aime_2024{tag}")
    aime, aime_dups = _dedup(aime_rows, "AIME 2024")
    if not sample and len(aime) != EXPECTED_AIME_PROBLEMS:
        print(
            f"warning: {len(aime)} distinct AIME 2024 problems after de-duplication (expected "
            f"{EXPECTED_AIME_PROBLEMS})",
            file=sys.stderr,
        )

    per_source, counts = _train_rows(args, dapo_src, dolci_src, tag)
    train = [row for rows in per_source.values() for row in rows]
    seen_before = {_key(r["_problem"]) for r in per_source["dapo"]}
    cross = sum(_key(r["_problem"]) in seen_before for r in per_source.get("dolci", []))
    if args.dedup_across_sources:
        train = dedup(train, "train (across sources)")
    aime_keys = {_key(r["_problem"]) for r in aime}
    contaminated = [r for r in train if contains_any(r["_problem"], aime_keys)]
    train = [r for r in train if not contains_any(r["_problem"], aime_keys)]
    if not train:
        raise DataError("no training rows left")

    out = Path(args.out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    _verl_frame(train).to_parquet(out / "train.parquet", index=False)
    _verl_frame(aime).to_parquet(out / "aime2024.parquet", index=False)
    if not args.no_openrlhf:
        _write_jsonl(out / "openrlhf" / "train.jsonl", _openrlhf_records(train))
        _write_jsonl(out / "openrlhf" / "aime2024.jsonl", _openrlhf_records(aime))
    manifest = {
        "sample": sample,
        "sources": {"dapo": str(dapo_src), "dolci": str(dolci_src), "aime": str(aime_src)},
        "train_rows": len(train),
        "paper_train_rows": PAPER_TRAIN_PROMPTS,
        "train_rows_in": counts["in"],
        "train_duplicates_removed": counts["duplicates_removed"],
        "train_in_both_sources": cross,
        "dedup_across_sources": args.dedup_across_sources,
        "train_aime_overlap_removed": len(contaminated),
        "train_multi_answer_rows": sum(len(r["extra_info"]["answers"]) > 1 for r in train),
        "dolci_template": args.dolci_template,
        "val_rows": len(aime),
        "val_duplicates_removed": aime_dups,
        "val_data_source": val_source,
        "files": sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != "manifest.json"),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    p.add_argument("--out-dir", required=True, help="where train.parquet, aime2024.parquet, openrlhf/ go")
    p.add_argument("--dapo", help=f"DAPO-Math-17k: local path or Hub id (default {HUB_DAPO})")
    p.add_argument("--dolci", help=f"Dolci-RL-Zero-Math: local path, Hub id, or 'none' (default {HUB_DOLCI})")
    p.add_argument("--aime", help=f"AIME 2024: local path or Hub id (default {HUB_AIME})")
    p.add_argument("--sample", action="store_true", help="use the synthetic sample rows in examples/data/sample/")
    p.add_argument(
        "--val-data-source", help="data_source of the AIME rows (default aime2024; aime2024_sample with --sample)"
    )
    p.add_argument(
        "--dolci-template",
        choices=("keep", "dapo"),
        default="keep",
        help="keep Dolci's prompt text (default, the paper's) or wrap DAPO's instruction around it",
    )
    p.add_argument("--keep-train-dups", action="store_true", help="keep repeated problems within a training source")
    p.add_argument(
        "--dedup-across-sources",
        action="store_true",
        help="keep a problem found in both DAPO-Math and Dolci once (not the paper's 30,712-prompt union)",
    )
    p.add_argument("--no-openrlhf", action="store_true", help="skip the OpenRLHF jsonl files")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        manifest = build(args)
    except DataError as e:
        print(f"prepare_aime_dapo: {e}", file=sys.stderr)
        return 1
    print(json.dumps(manifest, indent=2))
    print(f"train prompts: {manifest['train_rows']} (the paper's App. F: {PAPER_TRAIN_PROMPTS})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
