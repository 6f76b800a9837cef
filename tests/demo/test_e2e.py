import csv
import json

import pytest

from sat_ext.demo import cli, losses

TINY = ["--steps", "4", "--sft-max-steps", "25", "--eval-every", "2", "--eval-size", "16", "--jobs", "1",
        "--no-progress", "--prompts-per-step", "4", "--group-size", "4"]


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_quick_end_to_end(tmp_path):
    out = tmp_path / "out"
    rc = cli.main(["--quick", *TINY, "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert rc == 0
    for name in ("results.csv", "results.md", "summary.md", "runs.csv", "history.jsonl", "manifest.json",
                 "reward_curves.png", "final_vs_lag.png", "sat_diagnostics.png", "lag_histogram.png"):
        assert (out / name).stat().st_size > 0, name
    rows = _rows(out / "results.csv")
    expect_losses = ["vanilla", "sat"] if losses.verl_available() else ["sat"]
    assert [(r["loss"], int(r["lag"])) for r in rows] == [(l, k) for l in expect_losses for k in (1, 8)]
    assert all(int(r["seeds"]) == 1 for r in rows)
    md = (out / "results.md").read_text()
    assert "| SAT-GRPO |" in md and "lag 8" in md
    summary = (out / "summary.md").read_text()
    assert "Where each loss breaks" in summary and "Does SAT win?" in summary and "Wall time" in summary
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["lags"] == [1, 8]
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert len(history) == len(rows)
    assert all(len(h["history"]) == 4 for h in history)
    # The warm start is cached: a second run reuses it.
    assert list((tmp_path / "cache").glob("warm-*.pt"))


def test_without_verl_only_sat_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(losses, "verl_available", lambda: False)
    out = tmp_path / "out"
    rc = cli.main([*TINY, "--losses", "vanilla,sat", "--lags", "2", "--seeds", "1", "--out", str(out),
                   "--no-cache"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "verl is not installed: skipping ['vanilla']" in err
    rows = _rows(out / "results.csv")
    assert [(r["loss"], r["lag"]) for r in rows] == [("sat", "2")]
    assert "backend: sat_ext.core" in (out / "summary.md").read_text()


def test_bad_arguments(tmp_path, capsys):
    assert cli.main(["--losses", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown loss" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--lags", "a,b"])


def test_python_dash_m_help():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "sat_ext.demo", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "--quick" in p.stdout and "--lags" in p.stdout
