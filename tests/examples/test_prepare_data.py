"""examples/data/prepare_aime_dapo.py on the shipped sample rows, read back the way verl and OpenRLHF read them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "data" / "prepare_aime_dapo.py"
SAMPLE = REPO / "examples" / "data" / "sample"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sat_aime")
    res = _run("--out-dir", str(out), "--sample")
    assert res.returncode == 0, res.stderr
    return out


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sample_rows_are_labelled_synthetic():
    for f in SAMPLE.glob("*.jsonl"):
        for rec in _jsonl(f):
            assert "synthetic sample row" in rec.get("note", rec.get("extra_info", {}).get("note", ""))
            text = json.dumps(rec)
            assert "[SAMPLE]" in text


def test_aime_is_deduplicated_and_carries_no_sample_count(out):
    raw = _jsonl(SAMPLE / "aime_2024.sample.jsonl")
    distinct = {r["prompt"][0]["content"] for r in raw}
    assert len(raw) > len(distinct) == 3  # the sample repeats each problem, like the Hub file

    val = pd.read_parquet(out / "aime2024.parquet")
    assert len(val) == len(distinct)
    assert val["prompt"].map(lambda p: p[0]["content"]).is_unique
    assert "__rollout_n__" not in val.columns  # the count is the config's val_kwargs.n (verl reads this column first)
    assert (val["data_source"] == "aime2024_sample").all()
    assert sorted(val["reward_model"].map(lambda r: r["ground_truth"])) == ["4", "63", "9"]

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["val_rows"] == 3 and manifest["val_duplicates_removed"] == len(raw) - 3
    assert manifest["sample"] is True


def test_train_rows_the_papers_union(out):
    """7 DAPO rows (2 repeats) + 5 Dolci rows (one also in DAPO, kept as in the paper's 30,712-prompt union; one
    containing an AIME problem, dropped; one with two answers) -> 9 rows, each source's own prompt text."""
    train = pd.read_parquet(out / "train.parquet")
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert len(train) == 9 and (train["data_source"] == "math_dapo").all()
    val_problems = [p[0]["content"] for p in pd.read_parquet(out / "aime2024.parquet")["prompt"]]
    sources = train["extra_info"].map(lambda e: e["source"])
    for prompt, source in zip(train["prompt"], sources):
        assert len(prompt) == 1 and prompt[0]["role"] == "user"
        text = prompt[0]["content"]
        assert not any("[SAMPLE]" + v.split("[SAMPLE]")[1].split("\n")[0] in text for v in val_problems)
        dapo_template = text.startswith("Solve the following math problem step by step.")
        assert dapo_template == (source == "dapo_math_17k_sample")  # Dolci keeps its own text (the paper's)
    answers = train["extra_info"].map(lambda e: list(e["answers"]))
    assert [a for a in answers if len(a) > 1] == [["\\frac{1}{2}", "0.5"]]
    assert all(rm["ground_truth"] == a[0] for rm, a in zip(train["reward_model"], answers))
    m = json.loads((out / "manifest.json").read_text())
    assert (m["train_rows_in"], m["train_duplicates_removed"], m["train_in_both_sources"]) == (
        {"dapo": 7, "dolci": 5},
        {"dapo": 2, "dolci": 0},
        1,
    )
    assert (m["train_aime_overlap_removed"], m["train_multi_answer_rows"], m["paper_train_rows"]) == (1, 1, 30712)


def test_options_that_are_not_the_papers(tmp_path):
    res = _run("--out-dir", str(tmp_path), "--sample", "--dedup-across-sources", "--dolci-template", "dapo")
    assert res.returncode == 0, res.stderr
    assert "train prompts: 8 (the paper's App. F: 30712)" in res.stderr
    train = pd.read_parquet(tmp_path / "train.parquet")
    assert len(train) == 8 and train["prompt"].map(lambda p: p[0]["content"]).is_unique
    assert all(p[0]["content"].startswith("Solve the following math problem step by step.") for p in train["prompt"])


def test_verl_reads_the_files_through_the_examples_dataset_and_reward(out, tmp_path):
    pytest.importorskip("verl")
    pytest.importorskip("math_verify")
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import collate_fn, get_dataset_class

    from sat_ext.examples.math_reward import compute_score

    cfg = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 2048,
            "return_raw_chat": True,
            "filter_overlong_prompts": False,
            "truncation": "error",
            "cache_dir": str(out / "cache"),
            "custom_cls": {"path": "pkg://sat_ext.examples.verl_dataset", "name": "ConfigCountDataset"},
        }
    )
    dataset_cls = get_dataset_class(cfg)  # as the examples' data.custom_cls makes verl resolve it
    # a validation file written for another recipe (the earlier data script wrote __rollout_n__ = 8): the column
    # is dropped, so verl's V1 validation takes val_kwargs.n (trainer_base.py:1055-1057)
    stale = pd.read_parquet(out / "aime2024.parquet").assign(__rollout_n__=8)
    stale.to_parquet(tmp_path / "stale.parquet")
    val = dataset_cls(data_files=[str(tmp_path / "stale.parquet")], tokenizer=None, config=cfg)
    batch = collate_fn([val[i] for i in range(len(val))])
    assert "__rollout_n__" not in batch and len(batch["data_source"]) == 3
    for source, rm, extra in zip(batch["data_source"], batch["reward_model"], batch["extra_info"]):
        answer = rm["ground_truth"]
        assert compute_score(source, f"work...\nAnswer: {answer}", answer, extra) == 1.0
        assert compute_score(source, "work...\nAnswer: 999999", answer, extra) == 0.0
    train = dataset_cls(data_files=[str(out / "train.parquet")], tokenizer=None, config=cfg)
    assert len(train) == 9 and train[0]["raw_prompt"][0]["role"] == "user"
    rows = [train[i] for i in range(len(train))]
    two = next(r for r in rows if len(r["extra_info"]["answers"]) == 2)  # either answer scores right
    for response in ("Answer: 0.5", "Answer: \\frac{1}{2}"):
        assert compute_score("math_dapo", response, two["reward_model"]["ground_truth"], two["extra_info"]) == 1.0


def test_openrlhf_files(out):
    train = _jsonl(out / "openrlhf" / "train.jsonl")
    val = _jsonl(out / "openrlhf" / "aime2024.jsonl")
    assert len(train) == 9 and len(val) == 3
    assert all(set(r) == {"prompt", "label", "datasource"} for r in train + val)
    assert all(isinstance(r["label"], list) and r["label"] for r in train + val)  # the accepted answers
    assert {r["datasource"] for r in val} == {"aime2024_sample"}
    # OpenRLHF maps eval prompts to their datasource by prompt text, so they must be distinct.
    assert len({r["prompt"][0]["content"] for r in val}) == 3


def test_local_parquet_input_and_conflicting_answers(tmp_path):
    aime = pd.read_json(SAMPLE / "aime_2024.sample.jsonl", lines=True)
    aime.to_parquet(tmp_path / "aime.parquet")
    res = _run(
        "--out-dir",
        str(tmp_path / "o"),
        "--dapo",
        str(SAMPLE / "dapo_math_17k.sample.jsonl"),
        "--aime",
        str(tmp_path / "aime.parquet"),
        "--dolci",
        "none",
        "--keep-train-dups",
    )
    assert res.returncode == 0, res.stderr
    assert "warning: 3 distinct AIME 2024 problems" in res.stderr  # not --sample: the real file has 30
    val = pd.read_parquet(tmp_path / "o" / "aime2024.parquet")
    assert len(val) == 3 and (val["data_source"] == "aime2024").all()
    assert len(pd.read_parquet(tmp_path / "o" / "train.parquet")) == 7  # repeats kept

    rm = list(aime["reward_model"])
    rm[3] = {"ground_truth": "5", "style": "rule-lighteval/MATH_v2"}  # row 3 repeats row 0's problem
    aime["reward_model"] = rm
    aime.to_parquet(tmp_path / "bad.parquet")
    res = _run("--out-dir", str(tmp_path / "o2"), "--sample", "--aime", str(tmp_path / "bad.parquet"))
    assert res.returncode == 1 and "appears with answers ['4'] and ['5']" in res.stderr

    res = _run("--out-dir", str(tmp_path / "o3"), "--aime", str(tmp_path / "missing.parquet"), "--sample")
    assert res.returncode == 1 and "no such file or directory" in res.stderr
