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


def test_aime_is_deduplicated_with_avg8_n(out):
    raw = _jsonl(SAMPLE / "aime_2024.sample.jsonl")
    distinct = {r["prompt"][0]["content"] for r in raw}
    assert len(raw) > len(distinct) == 3  # the sample repeats each problem, like the Hub file

    val = pd.read_parquet(out / "aime2024.parquet")
    assert len(val) == len(distinct)
    assert val["prompt"].map(lambda p: p[0]["content"]).is_unique
    assert (val["__rollout_n__"] == 8).all()
    assert (val["data_source"] == "aime2024_sample").all()
    assert sorted(val["reward_model"].map(lambda r: r["ground_truth"])) == ["4", "63", "9"]

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["val_rows"] == 3 and manifest["val_duplicates_removed"] == len(raw) - 3
    assert manifest["val_rollout_n"] == 8 and manifest["sample"] is True


def test_train_dedup_decontamination_and_schema(out):
    train = pd.read_parquet(out / "train.parquet")
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    problems = train["prompt"].map(lambda p: p[0]["content"])
    assert problems.is_unique
    # 7 DAPO rows (2 repeats) + 4 Dolci rows (one also in DAPO, one equal to an AIME problem) -> 7 rows.
    assert len(train) == 7
    val_problems = set(pd.read_parquet(out / "aime2024.parquet")["prompt"].map(lambda p: p[0]["content"]))
    assert not set(problems) & val_problems
    assert (train["data_source"] == "math_dapo").all()
    for prompt in train["prompt"]:
        assert len(prompt) == 1 and prompt[0]["role"] == "user"
        assert prompt[0]["content"].startswith("Solve the following math problem step by step.")
        assert prompt[0]["content"].endswith('after "Answer:".')
    assert set(train["extra_info"].map(lambda e: e["source"])) == {"dapo_math_17k_sample", "dolci_rl_zero_math_sample"}
    m = json.loads((out / "manifest.json").read_text())
    assert (m["train_rows_in"], m["train_duplicates_removed"], m["train_aime_overlap_removed"]) == (
        {"dapo": 7, "dolci": 4}, 3, 1)


def test_verl_reads_the_files_and_scores_them(out):
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.reward_score import default_compute_score

    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 2048, "return_raw_chat": True,
                            "filter_overlong_prompts": False, "truncation": "error",
                            "cache_dir": str(out / "cache")})
    val = RLHFDataset(data_files=[str(out / "aime2024.parquet")], tokenizer=None, config=cfg)
    batch = collate_fn([val[i] for i in range(len(val))])
    assert list(batch["__rollout_n__"]) == [8, 8, 8]  # what verl's V1 validation reads per row
    for source, gt in zip(batch["data_source"], batch["reward_model"]):
        answer = gt["ground_truth"]
        assert default_compute_score(source, f"work...\nAnswer: {answer}", answer)["acc"] is True
        assert default_compute_score(source, "work...\nAnswer: 999999", answer)["acc"] is False
    train = RLHFDataset(data_files=[str(out / "train.parquet")], tokenizer=None, config=cfg)
    assert len(train) == 7 and train[0]["raw_prompt"][0]["role"] == "user"


def test_openrlhf_files(out):
    train = _jsonl(out / "openrlhf" / "train.jsonl")
    val = _jsonl(out / "openrlhf" / "aime2024.jsonl")
    assert len(train) == 7 and len(val) == 3
    assert all(set(r) == {"prompt", "label", "datasource"} for r in train + val)
    assert {r["datasource"] for r in val} == {"aime2024_sample"}
    # OpenRLHF maps eval prompts to their datasource by prompt text, so they must be distinct.
    assert len({r["prompt"][0]["content"] for r in val}) == 3


def test_local_parquet_input_and_conflicting_answers(tmp_path):
    aime = pd.read_json(SAMPLE / "aime_2024.sample.jsonl", lines=True)
    aime.to_parquet(tmp_path / "aime.parquet")
    res = _run("--out-dir", str(tmp_path / "o"), "--dapo", str(SAMPLE / "dapo_math_17k.sample.jsonl"),
               "--aime", str(tmp_path / "aime.parquet"), "--dolci", "none", "--val-n", "4",
               "--keep-train-dups")
    assert res.returncode == 0, res.stderr
    assert "warning: 3 distinct AIME 2024 problems" in res.stderr  # not --sample: the real file has 30
    val = pd.read_parquet(tmp_path / "o" / "aime2024.parquet")
    assert len(val) == 3 and (val["__rollout_n__"] == 4).all() and (val["data_source"] == "aime2024").all()
    assert len(pd.read_parquet(tmp_path / "o" / "train.parquet")) == 7  # repeats kept

    rm = list(aime["reward_model"])
    rm[3] = {"ground_truth": "5", "style": "rule-lighteval/MATH_v2"}  # row 3 repeats row 0's problem
    aime["reward_model"] = rm
    aime.to_parquet(tmp_path / "bad.parquet")
    res = _run("--out-dir", str(tmp_path / "o2"), "--sample", "--aime", str(tmp_path / "bad.parquet"))
    assert res.returncode == 1 and "appears with answers '4' and '5'" in res.stderr

    res = _run("--out-dir", str(tmp_path / "o3"), "--aime", str(tmp_path / "missing.parquet"), "--sample")
    assert res.returncode == 1 and "no such file or directory" in res.stderr
