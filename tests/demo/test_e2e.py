import csv
import json

import pytest

from sat_ext.demo import cli, losses
from sat_ext.demo.engines.vllm_engine import vllm_available

TINY = [
    "--steps",
    "4",
    "--sft-max-steps",
    "25",
    "--eval-every",
    "2",
    "--eval-size",
    "16",
    "--jobs",
    "1",
    "--no-progress",
    "--prompts-per-step",
    "4",
    "--group-size",
    "4",
]


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_quick_end_to_end(tmp_path):
    """``sat-ext demo --quick`` (tiny sizes) with the default engine: the real vLLM engine where installed."""
    out = tmp_path / "out"
    rc = cli.main(["--quick", *TINY, "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert rc == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine"] == ("vllm" if vllm_available()[0] else "emulated")
    for name in (
        "results.csv",
        "results.md",
        "summary.md",
        "runs.csv",
        "history.jsonl",
        "manifest.json",
        "reward_curves.png",
        "final_vs_lag.png",
        "sat_diagnostics.png",
        "lag_histogram.png",
    ):
        assert (out / name).stat().st_size > 0, name
    rows = _rows(out / "results.csv")
    expect_losses = ["vanilla", "sat", "sat_gspo+r3"] if losses.verl_available() else ["sat", "sat_gspo+r3"]
    assert [(r["loss"], int(r["lag"])) for r in rows] == [(loss, k) for loss in expect_losses for k in (1, 8)]
    assert all(int(r["seeds"]) == 1 for r in rows)
    md = (out / "results.md").read_text()
    assert "| SAT-GRPO |" in md and "| SAT-GSPO w/ R3 |" in md and "lag 8" in md
    summary = (out / "summary.md").read_text()
    for part in (
        "Where each loss breaks",
        "Does SAT win?",
        "Wall time",
        "Calibration against the paper",
        "Does SAT's gate engage?",
        "| GRPO | 0.0103 |",
    ):
        assert part in summary, part
    assert manifest["lags"] == [1, 8]
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert len(history) == len(rows)
    assert all(len(h["history"]) == 4 for h in history)
    # The warm start is cached: a second run reuses it.
    assert list((tmp_path / "cache").glob("warm-*.pt"))


def test_without_verl_only_sat_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(losses, "verl_available", lambda: False)
    out = tmp_path / "out"
    rc = cli.main(
        [
            *TINY,
            "--losses",
            "vanilla,sat",
            "--lags",
            "2",
            "--seeds",
            "1",
            "--out",
            str(out),
            "--no-cache",
            "--engine",
            "emulated",
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "verl is not installed: skipping ['vanilla']" in err
    rows = _rows(out / "results.csv")
    assert [(r["loss"], r["lag"]) for r in rows] == [("sat", "2")]
    assert "backend: sat_ext.core" in (out / "summary.md").read_text()


def test_bad_arguments(tmp_path, capsys):
    assert cli.main(["--losses", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown loss 'nope'" in capsys.readouterr().err
    assert cli.main(["--methods", "dppo_tv+r3", "--out", str(tmp_path)]) == 2
    assert "composes R3 with" in capsys.readouterr().err
    assert cli.main(["--methods", "vanilla+tis", "--denominator", "rollout", "--out", str(tmp_path)]) == 2
    assert "TIS weights" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--lags", "a,b"])


def test_python_dash_m_help():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "sat_ext.demo", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "--quick" in p.stdout and "--lags" in p.stdout


def test_frontier_on_the_code_task_end_to_end(tmp_path):
    """``sat-ext demo --frontier --task code`` (tiny sizes, emulated engine): the frontier's files and sections."""
    out = tmp_path / "out"
    rc = cli.main(
        [
            "--frontier",
            "--task",
            "code",
            *TINY,
            "--methods",
            "vanilla,sat",
            "--lags",
            "1,2",
            "--lr-mults",
            "1,8",
            "--seeds",
            "2",
            "--engine",
            "emulated",
            "--out",
            str(out),
            "--no-cache",
        ]
    )
    assert rc == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "code" and manifest["lr_mults"] == [1.0, 8.0] and manifest["lags"] == [1, 2]
    for name in (
        "frontier.csv",
        "frontier.md",
        "summary.md",
        "heatmaps.png",
        "frontier_curves.png",
        "runs.csv",
        "history.jsonl.gz",
    ):
        assert (out / name).stat().st_size > 0, name
    cells = _rows(out / "frontier.csv")
    assert sorted((r["loss"], int(r["lag"]), float(r["lr_mult"])) for r in cells) == sorted(
        (m, k, x) for m in ("vanilla", "sat") for k in (1, 2) for x in (1.0, 8.0)
    )
    assert all(int(r["seeds"]) == 2 for r in cells)
    summary = (out / "summary.md").read_text()
    assert "task code" in summary and "all hidden tests pass" in summary and "## Stable lag" in summary
    assert len(_rows(out / "runs.csv")) == 16


def test_sigterm_during_a_sweep_runs_its_cleanup():
    """A SIGTERM inside the sweep raises SystemExit (so execute's finally closes the vLLM engines) and the
    previous handler is back afterwards."""
    import os
    import signal

    from sat_ext.demo.cli import sigterm_exits

    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(SystemExit) as exit_info:
        with sigterm_exits():
            try:
                os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next bytecode
            finally:
                cleaned.append(True)
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) is before
