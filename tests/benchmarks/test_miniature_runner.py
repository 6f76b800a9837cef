"""benchmarks/miniature_e1_e2.py: the pre-registered plan of E1 / E2 and its judge, on synthetic run folders."""

import argparse
import gzip
import json

import miniature_e1_e2 as M
import pytest

from sat_ext.demo import prereg as P
from sat_ext.demo.learner import BASE_Q


def _opts(**kw):
    base = dict(
        out="/tmp/x", jobs=2, engine="emulated", cache_dir=None, isa_cap="avx2", dry_run=False, steps_override=None
    )
    base.update(kw)
    base.setdefault("seeds_override", None)
    return argparse.Namespace(**base)


def _flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def test_stage1_plan_is_the_preregistered_cells():
    plan = M.stage1_plan(3.0)
    cells = {(i.task, i.mult, k) for i in plan if i.role == M.BASE_RUNS for k in i.lags}
    assert cells == {("addition", 1.0, 8), ("addition", 1.0, 32), ("addition", 2.0, 8), ("code", 3.0, 8)}
    for inv in plan:
        argv = inv.demo_args(M.Path("/o") / inv.name, _opts())
        assert _flag(argv, "--eval-every") == "25" and _flag(argv, "--eval-size") == "256"
        assert "--log-base-q" in argv and _flag(argv, "--engine") == "emulated"
        assert (_flag(argv, "--lr-warmup") == "10") == (inv.mult > 1)  # the warm-up wherever lr > x1
        assert _flag(argv, "--seeds") == "2"
        if inv.role == M.BASE_RUNS:
            assert _flag(argv, "--methods") == "vanilla,gspo" and int(_flag(argv, "--steps")) >= 1500
        if inv.role == M.LAG0:
            assert _flag(argv, "--lags") == "1" and _flag(argv, "--prefetch") == "0"
            assert int(_flag(argv, "--steps")) >= 1500
        if inv.role == M.SAT_PROBE:
            assert _flag(argv, "--methods") == "sat,sat_gspo" and _flag(argv, "--steps") == "50"


def test_e2_and_stage2_plans():
    pairs, lag0 = M.e2_plan()
    argv = pairs.demo_args(M.Path("/o"), _opts())
    assert _flag(argv, "--methods") == "vanilla,gspo,sat,sat_gspo" and _flag(argv, "--lags") == "1,8,32"
    assert _flag(argv, "--steps") == "300" and _flag(argv, "--seeds") == "8" and _flag(argv, "--lr-mults") == "1"
    assert "--lr-warmup" not in argv
    assert _flag(lag0.demo_args(M.Path("/o"), _opts()), "--prefetch") == "0"
    (s2,) = M.stage2_plan([("addition", 2.0, 8, "gspo")])
    argv = s2.demo_args(M.Path("/o"), _opts(steps_override=20, seeds_override=1))
    assert _flag(argv, "--methods") == "gspo,sat_gspo" and _flag(argv, "--lr-warmup") == "10"
    assert _flag(argv, "--steps") == "20" and _flag(argv, "--seeds") == "1"
    assert s2.seeds == 5 and s2.steps == 1500


def test_e3_plan_is_the_preregistered_program_cell():
    pairs, lag0 = M.e3_plan()
    argv = pairs.demo_args(M.Path("/o"), _opts())
    assert _flag(argv, "--task") == "program" and _flag(argv, "--lags") == "8" and _flag(argv, "--seeds") == "5"
    assert _flag(argv, "--methods") == "vanilla,gspo,sat,sat_gspo" and _flag(argv, "--steps") == "300"
    assert _flag(argv, "--lr-mults") == "1" and "--lr-warmup" not in argv
    argv = lag0.demo_args(M.Path("/o"), _opts())
    assert _flag(argv, "--prefetch") == "0" and _flag(argv, "--lags") == "1" and _flag(argv, "--seeds") == "2"


def test_e3_is_judged_apart_from_e2(tmp_path):
    """The program task's pairs get their own cells, table and verdicts; E2's addition pairs are not mixed in."""
    runs = []
    for s in range(5):
        runs.append(("vanilla", 8, s, _evals(300, _flat), _hist(300, BASE_Q, lambda _s: 0.01)))
        runs.append(("sat", 8, s, _evals(300, lambda _s, s=s: 0.4 + 0.02 + 0.001 * s), _hist(300, M.CLIP, _flat)))
    _write(tmp_path, "e3/pairs", M.PROGRAM_PAIRS, "program", 1.0, runs)
    _write(tmp_path, "e2/pairs", M.PAIRS, "addition", 1.0, [("vanilla", 8, 0, _evals(300, _flat), [])])
    v = M.judge(tmp_path)
    assert M.CellKey("E3", "program", 1.0, 8, "vanilla") in M.classify_cells(M.load_runs(tmp_path))
    assert v["E3"]["vanilla/lag8"]["verdict"] == P.BETTER and v["E3"]["vanilla/lag8"]["class"] == P.ACTIVE
    assert "vanilla/lag8" not in v["E2"]  # E2's lone base has no SAT pair
    e3 = (tmp_path / "e3.md").read_text()
    assert "4c636ca" in e3 and "9918233" in e3 and "| 8 | SAT-active |" in e3


def test_e4_plan_is_the_preregistered_agent_cells():
    pairs, lag0, gspo_pairs, gspo_lag0 = M.e4_plan()
    argv = gspo_pairs.demo_args(M.Path("/o"), _opts())  # E4b, miniature_agent_gspo.md
    assert (
        _flag(argv, "--methods") == "gspo,sat_gspo" and _flag(argv, "--lags") == "8" and _flag(argv, "--seeds") == "5"
    )
    assert _flag(argv, "--mode") == "bounded" and _flag(argv, "--steps") == "300" and gspo_pairs.role == M.AGENT_PAIRS
    argv = gspo_lag0.demo_args(M.Path("/o"), _opts())
    assert _flag(argv, "--methods") == "gspo" and _flag(argv, "--lags") == "0" and _flag(argv, "--seeds") == "2"
    argv = pairs.demo_args(M.Path("/o"), _opts())
    assert _flag(argv, "--task") == "agent" and _flag(argv, "--mode") == "bounded" and _flag(argv, "--lags") == "1,4,8"
    assert (
        _flag(argv, "--methods") == "vanilla,sat" and _flag(argv, "--steps") == "300" and _flag(argv, "--seeds") == "5"
    )
    assert _flag(argv, "--lr-mults") == "1" and "--lr-warmup" not in argv and "--prefetch" not in argv
    argv = lag0.demo_args(M.Path("/o"), _opts())
    assert _flag(argv, "--mode") == "bounded" and _flag(argv, "--lags") == "0" and _flag(argv, "--seeds") == "2"
    # interval-mode invocations keep the record E1-E3 were kept with (no "mode"), so a rerun still skips them
    assert "mode" not in M._record(M.e3_plan()[0], _opts())["invocation"]
    assert M._record(pairs, _opts())["invocation"]["mode"] == "bounded"


def test_e4_is_judged_with_its_token_lags(tmp_path):
    """The agent pairs get their own cells, verdicts and slope, and the episodes' table pools the token-lag
    histogram and the tool counters."""
    runs = []
    for lag in (1, 4, 8):
        for s in range(5):
            agent = {"agent/turns": 3.0, "agent/format_failures": 0.2, "agent/unanswered": 0.1}
            hist = {"lag/token_hist/0": 10.0, f"lag/token_hist/{lag}": 30.0, "lag/token_lag_spread/max": float(lag)}
            base = [{**h, **agent, **hist} for h in _hist(300, BASE_Q, lambda _s: 0.01)]
            sat = [{**h, **agent, **hist, "actor/sat/threshold_q": 0.01} for h in _hist(300, M.CLIP, lambda _s: 0.02)]
            runs.append(("vanilla", lag, s, _evals(300, _flat), base))
            runs.append(("sat", lag, s, _evals(300, lambda _s, s=s: 0.4 + 0.001 * (s % 2)), sat))
    _write(tmp_path, "e4/pairs", M.AGENT_PAIRS, "agent", 1.0, runs)
    v = M.judge(tmp_path)
    assert v["E4"]["vanilla/lag4"] == {**v["E4"]["vanilla/lag4"], "class": P.ACTIVE, "verdict": P.EQUIVALENT}
    assert v["E4"]["vanilla/slope"] is not None and "vanilla/lag4" not in v["E3"]
    e4 = (tmp_path / "e4.md").read_text()
    assert "6240f5c" in e4 and "9918233" in e4
    assert "| 4 | GRPO | 5 | 0: 25%, 4: 75% | 4 | 3.00 | 0.200 | 0.100 | - |" in e4


def _evals(steps, value):
    return [[s, value(s)] for s in range(0, steps + 1, 25)]


def _write(out, name, role, task, mult, runs, returncode=0):
    """A finished invocation folder: runs = [(method, lag, seed, evals, history)]."""
    folder = out / name
    folder.mkdir(parents=True)
    inv = dict(name=name, role=role, task=task, mult=mult, methods=[], lags=[], seeds=0, steps=0, prefetch=1)
    (folder / "invocation.json").write_text(json.dumps({"invocation": inv, "returncode": returncode}))
    (folder / "manifest.json").write_text("{}")
    with gzip.open(folder / "history.jsonl.gz", "wt") as f:
        for method, lag, seed, evals, history in runs:
            f.write(json.dumps(dict(run="r", loss=method, lag=lag, seed=seed, evals=evals, history=history)) + "\n")


def _hist(steps, key, value):
    return [{"step": float(s), "loss": 0.1, key: value(s)} for s in range(1, steps + 1)]


def _flat(_s):
    return 0.40


def _rest_of_stage1(out, base_hist):
    """Stage 1's other three cells, nothing collapsing: addition x1 lag 32, addition x2 lag 8, code x3 lag 8."""
    flat = [(b, k, s, _evals(1500, _flat), base_hist) for b in ("vanilla", "gspo") for s in (0, 1) for k in (8, 32)]
    _write(out, "e1_stage1/addition_x1_lag32/bases", M.BASE_RUNS, "addition", 1.0, [r for r in flat if r[1] == 32])
    _write(out, "e1_stage1/addition_x2/bases", M.BASE_RUNS, "addition", 2.0, [r for r in flat if r[1] == 8])
    _write(out, "e1_stage1/code_x3/bases", M.BASE_RUNS, "code", 3.0, [r for r in flat if r[1] == 8])


def _falls(s):
    return 0.40 if s < 500 else 0.10


@pytest.fixture
def experiment(tmp_path):
    """Stage 1 at addition x1 lag 8 (GRPO seed 0 falls at 500), stage 2 there (every GRPO seed falls, no SAT-GRPO
    seed does), E2 with lag 32 inert; a failed invocation that must be ignored."""
    g = "e1_stage1/addition_x1"
    base_hist = _hist(1500, BASE_Q, lambda s: 0.05)
    _write(
        tmp_path,
        f"{g}/bases",
        M.BASE_RUNS,
        "addition",
        1.0,
        [("vanilla", 8, 0, _evals(1500, _falls), base_hist), ("vanilla", 8, 1, _evals(1500, _flat), base_hist)]
        + [("gspo", 8, s, _evals(1500, _flat), base_hist) for s in (0, 1)],
    )
    probe = _hist(50, M.CLIP, lambda s: 0.02)
    probes = [(m, 8, s, _evals(50, _flat), probe) for m in ("sat", "sat_gspo") for s in (0, 1)]
    _write(tmp_path, f"{g}/sat_first50", M.SAT_PROBE, "addition", 1.0, probes)
    _rest_of_stage1(tmp_path, base_hist)
    _write(tmp_path, f"{g}/lag0", M.LAG0, "addition", 1.0, [("vanilla", 1, 0, _evals(1500, _flat), base_hist)])
    stage2 = [("vanilla", 8, s, _evals(1500, _falls), base_hist) for s in range(5)]
    stage2 += [("sat", 8, s, _evals(1500, _flat), _hist(1500, M.CLIP, lambda s: 0.02)) for s in range(5)]
    _write(tmp_path, "e1_stage2/addition_x1_lag8_vanilla", M.STAGE2, "addition", 1.0, stage2)
    e2 = []
    for lag, q, gain in ((1, 0.02, 0.0), (8, 0.06, 0.01), (32, 0.30, 0.5)):
        for s in range(8):
            e2.append(("vanilla", lag, s, _evals(300, _flat), _hist(300, BASE_Q, lambda _s, q=q: q)))
            wiggle = 0.001 * (s % 3)
            e2.append(("sat", lag, s, _evals(300, lambda _s, g=gain, w=wiggle: 0.4 + g + w), _hist(300, M.CLIP, _flat)))
    _write(tmp_path, "e2/pairs", M.PAIRS, "addition", 1.0, e2)
    _write(tmp_path, "e2/broken", M.PAIRS, "addition", 1.0, [("gspo", 8, 0, _evals(300, _flat), [])], returncode=1)
    return tmp_path


def test_classification_from_q_and_newly_clipped(experiment):
    classes = M.classify_cells(M.load_runs(experiment))
    e1 = classes[M.CellKey("E1", "addition", 1.0, 8, "vanilla")]
    assert e1.label == P.ACTIVE and e1.median_q == pytest.approx(0.05) and e1.n_q == 2 * (1500 - 8)
    assert e1.n_clip == 2 * 50
    assert classes[M.CellKey("E2", "addition", 1.0, 32, "vanilla")].label == P.INERT
    assert classes[M.CellKey("E2", "addition", 1.0, 1, "vanilla")].label == P.ACTIVE
    assert M.CellKey("E2", "addition", 1.0, 8, "gspo") not in classes  # the failed invocation is not read


def test_stage2_cells_are_where_a_base_collapsed(experiment):
    assert M.collapsed_cells(M.load_runs(experiment)) == [("addition", 1.0, 8, "vanilla")]


def test_judge_writes_the_classification_before_any_outcome(experiment, monkeypatch):
    calls = []
    real_collapse, real_outcome = P.collapse, P.outcome

    def collapse(*a, **kw):
        calls.append((experiment / "classification.md").exists())
        return real_collapse(*a, **kw)

    def outcome(*a, **kw):
        calls.append((experiment / "classification.md").exists())
        return real_outcome(*a, **kw)

    monkeypatch.setattr(P, "collapse", collapse)
    monkeypatch.setattr(P, "outcome", outcome)
    v = M.judge(experiment)
    assert calls and all(calls)
    assert v["E1"]["outcome"] == "support"
    assert v["E1"]["stage2"]["addition/x1/lag8/vanilla"]["word"] == "support"
    e1 = (experiment / "e1.md").read_text()
    assert "9918233" in e1 and "**support**" in e1
    assert "1 of 2 with every evaluation equal" in e1  # stage 2's seeds 0, 1 against stage 1's (seed 1 differs)
    e2 = (experiment / "e2.md").read_text()
    assert "9918233" in e2 and P.INERT_WORDS in e2
    assert v["E2"]["vanilla/slope"]["n"] == 16  # lag 32 (inert) left out
    assert v["E2"]["vanilla/slope"]["slope"] == pytest.approx(0.01 / 3)
    assert v["E2"]["vanilla/lag8"]["verdict"] == P.BETTER
    assert "9918233" in (experiment / "classification.md").read_text()


def test_null_when_no_base_collapses(tmp_path):
    hist = _hist(1500, BASE_Q, lambda s: 0.05)
    flat = [(b, 8, s, _evals(1500, _flat), hist) for b in ("vanilla", "gspo") for s in (0, 1)]
    _write(tmp_path, "e1_stage1/addition_x1/bases", M.BASE_RUNS, "addition", 1.0, flat)
    assert M.judge(tmp_path)["E1"]["outcome"].startswith("pending (stage 1 lacks: addition x1 lag 32 GRPO;")
    _rest_of_stage1(tmp_path, hist)
    assert M.stage1_missing(M.load_runs(tmp_path)) == []
    v = M.judge(tmp_path)
    assert v["E1"]["outcome"] == "null"
    assert "no stale-data failure where SAT can act" in (tmp_path / "e1.md").read_text()


def test_overrides_are_flagged(tmp_path):
    _write(tmp_path, "e2/pairs", M.PAIRS, "addition", 1.0, [("vanilla", 1, 0, _evals(20, _flat), [])])
    rec = json.loads((tmp_path / "e2/pairs/invocation.json").read_text())
    (tmp_path / "e2/pairs/invocation.json").write_text(json.dumps({**rec, "steps_override": 20}))
    M.judge(tmp_path)
    assert "NOT the pre-registered settings" in (tmp_path / "e2.md").read_text()


def test_code_multiple_is_the_largest_below_the_threshold():
    def run(mult, method, q):
        return M.Run("c", M.CALIBRATION, "code", mult, method, 8, 0, [], _hist(100, BASE_Q, lambda s: q), {})

    runs = [run(1.0, "vanilla", 0.03), run(1.0, "gspo", 0.02), run(2.0, "vanilla", 0.11), run(2.0, "gspo", 0.05)]
    runs += [run(4.0, "vanilla", 0.12), run(4.0, "gspo", 0.05)]  # 0.12 is not below 0.12
    mult, medians = M.choose_code_mult(runs)
    assert mult == 2.0 and medians["x4 GRPO"] == pytest.approx(0.12)
    assert M.choose_code_mult(runs[4:])[0] is None


def test_a_finished_invocation_is_skipped_only_with_the_same_settings(tmp_path):
    inv = M.e2_plan()[1]
    folder = tmp_path / inv.name
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    opts = _opts(out=str(tmp_path))
    (folder / "invocation.json").write_text(json.dumps({**M._record(inv, opts), "returncode": 0}))
    assert M._done(folder, inv, opts)
    assert not M._done(folder, inv, _opts(out=str(tmp_path), steps_override=20))
    assert not M._done(folder, M.e2_plan()[0], opts)
    (folder / "invocation.json").write_text(json.dumps({**M._record(inv, opts), "returncode": 1}))
    assert not M._done(folder, inv, opts)
