"""The frontier's tables from known runs: collapsed cells, stable lags, SAT - base verdicts, the files."""

import argparse

import pytest

from sat_ext.demo import plots, summary, tables
from sat_ext.demo.cli import build_parser
from sat_ext.demo.methods import Method
from sat_ext.demo.plan import PlanError, build_plan
from sat_ext.demo.spec import RunResult

LAGS, MULTS, SEEDS = (1, 4, 16), (1.0, 4.0), (0, 1, 2)
GRPO, SAT = Method("vanilla"), Method("sat")


def _plan(**over) -> "tables.Plan":
    args = build_parser().parse_args(
        [
            "--frontier",
            "--methods",
            "vanilla,sat",
            "--lags",
            ",".join(map(str, LAGS)),
            "--lr-mults",
            ",".join(f"{m:g}" for m in MULTS),
            "--seeds",
            str(len(SEEDS)),
            "--steps",
            "60",
        ]
    )
    for k, v in over.items():
        setattr(args, k, v)
    return build_plan(args, "emulated")


def _result(spec, final: float, nonfinite: float = 0.0) -> RunResult:
    evals = [(0, 0.40), (20, 0.42), (40, final), (50, final), (60, final)]
    return RunResult(spec, [{"step": 1.0, "mismatch/d_pi": 0.01}], evals, {1: 16}, {"nonfinite_steps": nonfinite}, 1.0)


def _final(loss: str, lag: int, mult: float, seed: int) -> float:
    """GRPO collapses at lag 16 (one seed) at x1 and from lag 4 (every seed) at x4; SAT only at lag 16, x4."""
    if loss == "vanilla" and ((mult == 1.0 and lag == 16 and seed == 0) or (mult == 4.0 and lag >= 4)):
        return 0.05
    if loss == "sat" and mult == 4.0 and lag == 16:
        return 0.10
    return 0.45 + 0.01 * seed + (0.05 if loss == "sat" and mult == 4.0 else 0.0)


@pytest.fixture(scope="module")
def grid():
    plan = _plan()
    results = [_result(s, _final(s.loss, s.lag, s.recipe.lr / plan.base_lr, s.seed)) for s in plan.specs]
    return plan, tables.Grid(plan, results)


def test_the_plan_crosses_methods_lags_lr_multiples_and_seeds():
    plan = _plan()
    assert len(plan.specs) == 2 * len(LAGS) * len(MULTS) * len(SEEDS)
    assert {s.recipe.lr for s in plan.specs} == {5e-5, 2e-4}
    assert len({s.run_id for s in plan.specs}) == len(plan.specs)  # the lr is in the run id
    assert {s.warm.task for s in plan.specs} == {"addition"}
    assert "x 2 lr multiples" in plan.describe()
    with pytest.raises(PlanError, match="lr-mults"):
        _plan(lr_mults=[1.0, 0.0])
    with pytest.raises(PlanError, match="max-operand"):
        _plan(task="code", max_operand=50)
    assert {s.warm.task for s in _plan(task="code").specs} == {"code"}


def test_cells_collapse_fractions_and_stable_lags(grid):
    plan, g = grid
    assert g.get(GRPO, 16, 1.0).collapsed_frac == pytest.approx(1 / 3)
    assert g.get(GRPO, 4, 4.0).reasons == ["reward collapse"] * 3
    assert g.stable(GRPO, 1.0) == 4 and g.stable(GRPO, 4.0) == 1
    assert g.stable(SAT, 1.0) == 16 and g.stable(SAT, 4.0) == 4
    table = "\n".join(tables.stable_table(g))
    assert "| GRPO | 4 | 1 |" in table and "| SAT-GRPO | ≥ 16 | 4 |" in table
    moves = "\n".join(summary._frontier_moves(g))
    assert "lr x 1: ≥ 16 vs 4 (further)" in moves and "lr x 4: 4 vs 1 (further)" in moves


def test_paired_verdicts_use_the_demos_rule(grid):
    _plan_, g = grid
    lines, tally = tables.sat_verdicts(g)
    text = "\n".join(lines)
    # x1, lag 16: SAT 0.45/0.46/0.47 against GRPO 0.05/0.46/0.47: +0.133 ± 0.133 is inside 2 se: a tie.
    assert "+0.133 ± 0.133 tie (0/1)" in text
    # x4: lag 1 +0.05 on every seed (se 0): a WIN; lag 4 0.50/0.51/0.52 against 0.05; lag 16 both collapsed.
    assert "| x 4 | +0.050 ± 0.000 WIN (0/0) | +0.460 ± 0.006 WIN (0/3) | +0.050 ± 0.000 WIN (3/3) |" in text
    assert tally == {"above": 3, "tie": 3, "below": 0}


def test_a_non_finite_loss_collapses_a_cell(grid):
    plan, _g = grid
    results = [_result(s, 0.45, nonfinite=1.0 if s.seed == 2 else 0.0) for s in plan.specs]
    g = tables.Grid(plan, results)
    assert g.get(SAT, 1, 1.0).reasons == ["non-finite loss"] and g.stable(SAT, 1.0) is None
    assert "none (collapses at lag 1)" in "\n".join(tables.stable_table(g))


def test_the_files(tmp_path, grid):
    plan, g = grid
    names = tables.write_frontier(g, tmp_path) + [plots.plot_heatmaps(g, tmp_path).name]
    names.append(plots.plot_frontier_curves(g, tmp_path, "exact match").name)
    (tmp_path / "summary.md").write_text(
        summary.frontier_summary(g, ["# header", ""], plan.specs[0].evaluation, "exact match")
    )
    names.append("summary.md")
    assert set(names) == {"frontier.csv", "frontier.md", "summary.md", "heatmaps.png", "frontier_curves.png"}
    assert all((tmp_path / n).stat().st_size > 0 for n in names)
    rows = (tmp_path / "frontier.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * len(LAGS) * len(MULTS)
    text = (tmp_path / "summary.md").read_text()
    for part in (
        "## Stable lag",
        "## Does SAT move the frontier?",
        "## Paired verdicts",
        "## Collapse grid",
        "GRPO collapses at lag 1 in 0 of 3 seeds: the axis does not reach",
    ):
        assert part in text, part


def test_frontier_preset_reaches_lag_64_with_three_seeds():
    args = build_parser().parse_args(["--frontier"])
    assert isinstance(args, argparse.Namespace)
    plan = build_plan(args, "emulated")
    assert min(plan.lags) == 1 and max(plan.lags) >= 64 and plan.seeds >= 3 and len(plan.lr_mults) >= 2
    assert plan.steps >= max(plan.lags)  # the rollout copy is synced at least once at the largest lag
    keys = {m.key for m in plan.methods}
    assert {"vanilla", "gspo", "sat", "sat_gspo"} <= keys and keys & {"vanilla+tis", "dppo_tv", "dppo_tv+toy"}


def test_frontier_with_one_lr_multiple_is_still_a_frontier():
    # `--frontier --lr-mults 16` wrote the lag sweep's files before: the outputs were chosen by the count of
    # multiples, not by the preset.
    one = build_plan(build_parser().parse_args(["--frontier", "--lr-mults", "16", "--methods", "vanilla"]), "emulated")
    assert one.lr_mults == (16.0,) and one.is_frontier
    assert not build_plan(build_parser().parse_args(["--methods", "vanilla"]), "emulated").is_frontier
    assert build_plan(build_parser().parse_args(["--methods", "vanilla", "--lr-mults", "1,4"]), "emulated").is_frontier
