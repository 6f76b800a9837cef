"""The demo's decision rules (sat_ext.demo.stats): paired differences, WIN / tie / LOSS, collapse, stable lag."""

import math

import pytest

from sat_ext.demo.stats import (
    ABOVE,
    BELOW,
    COLLAPSE,
    TIE,
    CollapseRule,
    Diff,
    collapse_onset,
    collapse_reason,
    mean_se,
    paired,
    stable_lag,
    verdict,
)


def test_mean_se_is_the_standard_error_of_the_mean():
    d = mean_se([0.1, 0.3])
    assert d.mean == pytest.approx(0.2) and d.n == 2
    assert d.se == pytest.approx(math.sqrt(0.02) / math.sqrt(2))  # sample std 0.1414 / sqrt(2) = 0.1
    one = mean_se([0.4])
    assert one.mean == 0.4 and math.isnan(one.se) and one.n == 1
    with pytest.raises(ValueError, match="at least one"):
        mean_se([])


def test_paired_uses_only_the_shared_seeds_in_seed_order():
    d = paired({0: 0.5, 1: 0.7, 2: 0.9}, {1: 0.6, 2: 0.6, 3: 0.0})
    assert d.n == 2 and d.mean == pytest.approx((0.1 + 0.3) / 2)
    assert paired({0: 1.0}, {1: 1.0}) is None


@pytest.mark.parametrize(
    "mean,se,word",
    [
        (0.031, 0.001, ABOVE),  # beyond the 0.03 floor
        (0.029, 0.001, TIE),  # inside the floor
        (-0.031, 0.001, BELOW),
        (0.05, 0.03, TIE),  # 2 se = 0.06 > 0.05: the noise decides
        (0.07, 0.03, ABOVE),
        (-0.07, 0.03, BELOW),
        (0.04, float("nan"), TIE),  # one seed: tol 0.05
        (0.06, float("nan"), ABOVE),
    ],
)
def test_verdict_tolerance_is_max_of_floor_and_two_standard_errors(mean, se, word):
    got, tol = verdict(Diff(mean, se, 2 if math.isfinite(se) else 1))
    assert got == word
    assert tol == (max(0.03, 2 * se) if math.isfinite(se) else 0.05)


def test_verdict_floor_is_a_parameter():
    assert verdict(Diff(0.04, 0.001, 3), tol_floor=0.05)[0] == TIE
    assert verdict(Diff(0.04, 0.001, 3), tol_floor=0.01)[0] == ABOVE


def _evals(start, *rest):
    return [(0, start)] + [(10 * (i + 1), r) for i, r in enumerate(rest)]


def test_collapse_needs_every_one_of_the_last_window_evaluations_below_start_minus_margin():
    assert COLLAPSE == CollapseRule(margin=0.10, window=3)
    assert collapse_reason(_evals(0.4, 0.45, 0.2, 0.25, 0.29), 0) == "reward collapse"
    assert collapse_reason(_evals(0.4, 0.2, 0.2, 0.2, 0.31), 0) is None  # the last one recovered
    assert collapse_reason(_evals(0.4, 0.2, 0.2, 0.32, 0.2), 0) is None  # 0.32 is within the margin
    assert collapse_reason(_evals(0.4, 0.35, 0.32, 0.31), 0) is None  # worse, not collapsed
    assert collapse_reason(_evals(0.4, 0.1, float("nan"), 0.1), 0) == "reward collapse"  # non-finite counts as below


def test_collapse_on_a_non_finite_loss_whatever_the_reward():
    assert collapse_reason(_evals(0.4, 0.5, 0.5, 0.5), nonfinite_steps=1) == "non-finite loss"


def test_a_run_too_short_to_tell_does_not_collapse_on_reward():
    assert collapse_reason(_evals(0.4, 0.0, 0.0), 0) is None  # 2 evaluations after the start, window 3
    assert collapse_reason(_evals(0.4, 0.0, 0.0), 0, CollapseRule(window=2)) == "reward collapse"
    with pytest.raises(ValueError, match="warm start"):
        collapse_reason(_evals(float("nan"), 0.0, 0.0, 0.0), 0)


def test_collapse_rule_validation():
    with pytest.raises(ValueError, match="margin"):
        CollapseRule(margin=0.0)
    with pytest.raises(ValueError, match="window"):
        CollapseRule(window=0)


def test_collapse_onset_is_where_the_final_stretch_below_the_threshold_began():
    assert collapse_onset(_evals(0.4, 0.2, 0.35, 0.2, 0.1, 0.25)) == 30  # dipped at 10, recovered at 20
    assert collapse_onset(_evals(0.4, 0.2, 0.2, 0.35)) is None  # ends above
    assert collapse_onset(_evals(0.4)) is None


def test_stable_lag_stops_at_the_first_lag_with_a_collapsed_seed():
    assert stable_lag({1: 0.0, 4: 0.0, 16: 1 / 3, 64: 1.0}) == 4
    assert stable_lag({64: 0.0, 1: 0.0, 16: 0.0, 4: 0.0}) == 64  # order of the mapping is irrelevant
    assert stable_lag({1: 0.0, 4: 0.5, 16: 0.0}) == 1  # a stable cell past a collapse does not count
    assert stable_lag({1: 2 / 3, 4: 0.0}) is None
    assert stable_lag({}) is None
