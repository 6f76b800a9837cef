"""tools/compare_demo_runs.py, the check that a fresh clone's demo runs equal the kept ones."""

import csv
import json
from pathlib import Path

import compare_demo_runs as C


def _out(folder: Path, final: float, wall: float) -> Path:
    folder.mkdir()
    rec = {"run": "sat-interval1-lr5e-05-s0", "history": [{"step": 1.0, "loss": 0.5}], "wall_s": wall}
    rec["totals"] = {"cpu_s": wall, "dropped": 0.0}
    (folder / "history.jsonl").write_text(json.dumps(rec) + "\n")
    with open(folder / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["run", "final", "wall_s"])
        w.writeheader()
        w.writerow({"run": rec["run"], "final": final, "wall_s": wall})
    return folder


def test_timing_may_differ_and_nothing_else(tmp_path, capsys):
    kept = _out(tmp_path / "kept", 0.45, 10.0)
    assert C.main([str(kept), str(_out(tmp_path / "same", 0.45, 99.0))]) == 0
    assert C.main([str(kept), str(_out(tmp_path / "other", 0.46, 10.0))]) == 1
    assert "DIFFERS in runs.csv:final" in capsys.readouterr().out


def test_outputs_without_history_compare_their_runs_csv(tmp_path):
    """``--quick`` writes no history.jsonl: the rows of runs.csv are still compared."""
    kept = _out(tmp_path / "kept", 0.45, 10.0)
    (kept / "history.jsonl").unlink()
    assert C.main([str(kept), str(_out(tmp_path / "same", 0.45, 99.0))]) == 0
    assert C.main([str(kept), str(_out(tmp_path / "other", 0.46, 10.0))]) == 1


def test_a_differing_history_names_its_metrics(tmp_path, capsys):
    """The line names each per-step metric that differs, in how many steps, and by how much (relative)."""
    kept = _out(tmp_path / "kept", 0.45, 10.0)
    other = _out(tmp_path / "other", 0.45, 10.0)
    rec = json.loads((other / "history.jsonl").read_text())
    rec["history"] = [{"step": 1.0, "loss": 0.5 * (1 + 2e-6)}]
    (other / "history.jsonl").write_text(json.dumps(rec) + "\n")
    assert C.main([str(kept), str(other)]) == 1
    assert "DIFFERS in history: loss (1 of 1 steps, max rel 2e-06)" in capsys.readouterr().out
