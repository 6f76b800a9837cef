"""The pre-registered rules of E1 / E2 (sat_ext.demo.prereg, benchmarks/preregistered/miniature_e1_e2.md at
9918233), each boundary pinned on both sides."""

import math

import pytest

from sat_ext.demo import prereg as P


def _evals(rolling):
    """Evaluations every 25 steps whose rolling means (from the third on) are ``rolling``: the first three are
    the first mean, then each next evaluation moves the window by 3 x the change."""
    e = [rolling[0]] * 3
    for prev, cur in zip(rolling, rolling[1:]):
        e.append(e[-3] + 3 * (cur - prev))
    return [(25 * i, r) for i, r in enumerate(e)]


def test_helper_makes_the_rolling_means_asked_for():
    want = [0.5, 0.45, 0.38, 0.41]
    got = [r for _, r in P.rolling_means(_evals(want))]
    assert got == pytest.approx(want)
    assert [s for s, _ in P.rolling_means(_evals(want))] == [50, 75, 100, 125]


def test_rolling_mean_is_the_last_three_evaluations():
    ev = [(0, 0.3), (25, 0.6), (50, 0.9), (75, 0.0)]
    assert P.rolling_means(ev) == [(50, pytest.approx(0.6)), (75, pytest.approx(0.5))]
    assert P.rolling_means(ev[:2]) == []


@pytest.mark.parametrize(
    "rolling,collapsed,onset",
    [
        ([0.5, 0.4, 0.4, 0.4], True, 75),  # a fall of exactly 0.10 counts ("at least 0.10")
        ([0.5, 0.40001, 0.4, 0.4, 0.4], True, 100),  # the onset is the first evaluation at >= 0.10 below
        ([0.5, 0.4001, 0.4001, 0.4001], False, None),  # 0.0999: no fall
        ([0.5, 0.4, 0.45, 0.45], True, 75),  # back to exactly best - 0.05 is not "above": still collapsed
        ([0.5, 0.4, 0.4501, 0.3, 0.3, 0.3], True, 125),  # above best - 0.05: that fall recovered; the next one
        ([0.5, 0.4, 0.4, 0.4501], False, None),  # recovers at the end
        ([0.5, 0.4, 0.4], False, None),  # ends one evaluation after the fall: not collapsed
        ([0.5, 0.6, 0.5, 0.5, 0.5], True, 100),  # the best rolling mean so far (0.6), not the start
        ([0.5, 0.45, 0.4, 0.35, 0.35, 0.35], True, 100),  # a slow decline: first evaluation 0.10 below the best
    ],
)
def test_collapse_boundaries(rolling, collapsed, onset):
    c = P.collapse(_evals(rolling))
    assert c.collapsed is collapsed
    assert c.onset == onset
    if collapsed:
        assert c.reason == "reward fall"


def test_collapse_needs_two_evaluations_after_the_fall():
    assert not P.collapse(_evals([0.5, 0.4, 0.4])).collapsed
    assert "fewer than 2 evaluations" in P.collapse(_evals([0.5, 0.4, 0.4])).note
    assert P.collapse(_evals([0.5, 0.4, 0.4, 0.4])).collapsed


def test_a_fall_that_recovers_once_is_not_a_collapse_even_if_it_falls_less_again():
    # falls 0.10, recovers above 0.45, dips to 0.42 (0.08 below the best) for the rest: no collapse
    assert not P.collapse(_evals([0.5, 0.4, 0.46, 0.42, 0.42, 0.42])).collapsed


def test_non_finite_loss_collapses_at_its_step():
    c = P.collapse(_evals([0.5, 0.5, 0.5]), losses=[(1, 0.1), (7, float("nan")), (8, float("inf"))])
    assert c.collapsed and c.reason == "non-finite loss" and c.onset == 7
    assert not P.collapse(_evals([0.5, 0.5, 0.5]), losses=[(1, 0.1), (2, -3.0)]).collapsed


def test_non_finite_loss_and_an_earlier_fall_take_the_earlier_onset():
    c = P.collapse(_evals([0.5, 0.4, 0.4, 0.4, 0.4]), losses=[(110, float("nan"))])
    assert c.reason == "reward fall" and c.onset == 75


def test_outcome_is_the_mean_of_the_last_three_evaluations():
    assert P.outcome([(0, 0.1), (25, 0.2), (50, 0.4), (75, 0.6)]) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        P.outcome([(0, 0.1), (25, 0.2)])


@pytest.mark.parametrize(
    "df,q",
    [(1, 12.7062047), (4, 2.7764451), (7, 2.3646243), (22, 2.0738731), (1000, 1.9623391)],
)
def test_t_quantile_matches_the_tables(df, q):
    assert P.t_quantile(0.975, df) == pytest.approx(q, abs=1e-6)
    assert P.t_quantile(0.025, df) == pytest.approx(-q, abs=1e-6)


def test_t_interval_is_students():
    iv = P.t_interval([0.01, 0.03, 0.02, 0.04])
    sd = math.sqrt(sum((x - 0.025) ** 2 for x in [0.01, 0.03, 0.02, 0.04]) / 3)
    half = 3.1824463 * sd / 2
    assert iv.mean == pytest.approx(0.025)
    assert (iv.lower, iv.upper) == (pytest.approx(0.025 - half), pytest.approx(0.025 + half))
    one = P.t_interval([0.3])
    assert math.isnan(one.lower) and P.verdict(one) == P.INCONCLUSIVE


@pytest.mark.parametrize(
    "lower,upper,word",
    [
        (0.0001, 0.05, P.BETTER),
        (0.0, 0.05, P.INCONCLUSIVE),  # lower end exactly 0: not > 0
        (-0.05, -0.0001, P.WORSE),
        (-0.05, 0.0, P.INCONCLUSIVE),  # upper end exactly 0: not < 0
        (-0.0099, 0.0099, P.EQUIVALENT),
        (-0.0099, 0.01, P.INCONCLUSIVE),  # touching the margin: not inside (-0.01, +0.01)
        (-0.01, 0.0099, P.INCONCLUSIVE),
        (-0.02, 0.005, P.INCONCLUSIVE),
        (0.001, 0.005, P.BETTER),  # both better and inside the margin: the first rule written
    ],
)
def test_verdict_boundaries(lower, upper, word):
    assert P.verdict(P.Interval((lower + upper) / 2, lower, upper, 8)) == word


def test_paired_verdict_pairs_by_seed():
    iv, word = P.paired_verdict({0: 0.5, 1: 0.6, 2: 0.7, 9: 1.0}, {0: 0.4, 1: 0.5, 2: 0.6, 3: 0.0})
    assert iv.n == 3 and iv.mean == pytest.approx(0.1) and word == P.BETTER
    with pytest.raises(ValueError):
        P.paired_verdict({0: 1.0}, {1: 1.0})


def test_steady_state_and_first_steps():
    vals = [(s, float(s)) for s in range(1, 61)]
    assert P.steady_state(vals, 8) == [float(s) for s in range(9, 61)]
    assert P.steady_state(vals, 0) == [float(s) for s in range(2, 61)]  # the window is at least 1 step
    assert P.first_steps(vals) == [float(s) for s in range(1, 51)]


@pytest.mark.parametrize(
    "q,clip,label",
    [
        (0.1199, 0.01, P.ACTIVE),  # newly clipped exactly 1%: >= 1%
        (0.1199, 0.0099, P.BORDERLINE),
        (0.12, 0.05, P.BORDERLINE),  # q exactly 0.12: not < 0.12
        (0.1799, 0.05, P.BORDERLINE),
        (0.18, 0.05, P.INERT),  # q exactly 0.18: inert
        (0.18, 0.0, P.INERT),
        (0.5, None, P.INERT),  # inert needs no SAT run
        (0.05, None, P.UNCLASSIFIED),
        (None, 0.05, P.UNCLASSIFIED),
    ],
)
def test_classification_boundaries(q, clip, label):
    c = P.classify([q] if q is not None else [], [clip] if clip is not None else [])
    assert c.label == label


def test_classification_takes_medians_of_the_pooled_steps():
    assert P.classify([0.05, 0.06, 0.30], [0.02, 0.0, 0.02]).label == P.ACTIVE  # medians 0.06 and 0.02
    assert P.classify([0.05, 0.2, 0.30], [0.02]).label == P.INERT  # median 0.2


def _c(onset=None, reason="reward fall"):
    return P.Collapse(True, reason, onset) if onset is not None else P.Collapse(False)


def test_outlives():
    assert P.outlives(_c(100), _c())
    assert P.outlives(_c(100), _c(125))
    assert not P.outlives(_c(100), _c(100))
    assert not P.outlives(_c(), _c())  # neither collapsed: not outlived
    assert not P.outlives(_c(), _c(100))


def _clip(value):
    return [(s, value) for s in range(1, 1501)]


def test_e1_support_by_collapse_counts():
    pairs = {s: (_c(500) if s < 4 else _c(), _c()) for s in range(5)}  # base 4 of 5, SAT 0 of 5
    cell = P.e1_cell(pairs, {s: _clip(0.02) for s in range(5)}, cell_active=True)
    assert cell.support and not cell.refutation and cell.word == "support"
    pairs[4] = (_c(), _c(1400))  # SAT collapses once: no support by counts, and not outlived in 5 of 5
    assert not P.e1_cell(pairs, {}, True).support
    three = {s: (_c(500) if s < 3 else _c(), _c()) for s in range(5)}  # base 3 of 5
    assert not P.e1_cell(three, {}, True).support


def test_e1_support_by_outliving_every_pair():
    pairs = {s: (_c(500), _c(600)) for s in range(5)}  # SAT collapses in all 5, each later
    assert P.e1_cell(pairs, {s: _clip(0.0) for s in range(5)}, True).support
    pairs[2] = (_c(500), _c(500))  # one pair at the same onset: 4 of 5
    assert not P.e1_cell(pairs, {}, True).support


def test_e1_refutation_within_one_evaluation_while_the_gate_acts():
    clips = {s: _clip(0.02) for s in range(5)}
    near = {s: (_c(500), _c(525)) if s == 0 else (_c(), _c()) for s in range(5)}
    cell = P.e1_cell(near, clips, cell_active=True)
    assert cell.refutation and cell.refuting_seeds == (0,)
    far = {s: (_c(500), _c(550)) if s == 0 else (_c(), _c()) for s in range(5)}  # 50 steps: two evaluations
    assert not P.e1_cell(far, clips, True).refutation
    assert not P.e1_cell(near, clips, cell_active=False).refutation  # not a SAT-active cell
    quiet = {0: [(s, 0.02 if s < 400 or s >= 500 else 0.0) for s in range(1, 1501)]}  # gate off in 400..499
    assert not P.e1_cell(near, quiet, True).refutation
    edge = {0: [(s, 0.01 if s < 500 else 0.0) for s in range(1, 1501)]}  # exactly 1% before the onset
    assert P.e1_cell(near, edge, True).refutation


def test_clip_before_takes_the_100_steps_before_the_onset():
    clip = [(s, 1.0 if 400 <= s < 500 else 0.0) for s in range(1, 1001)]
    assert P.clip_before(clip, 500) == 1.0
    assert P.clip_before(clip, 501) == 1.0  # 401..500: one 0 of 100, median still 1
    assert P.clip_before(clip, 551) == 0.0
    assert math.isnan(P.clip_before([], 500))
    half = [(s, 1.0 if 400 <= s < 450 else 0.0) for s in range(1, 1001)]
    assert P.clip_before(half, 500) == 0.5  # steps 400..499 exactly: 50 ones, 50 zeros
    assert P.clip_before(half, 501) == 0.0  # 401..500: 49 ones


def test_e1_needs_five_pairs():
    pairs = {s: (_c(500), _c()) for s in range(4)}
    cell = P.e1_cell(pairs, {}, True)
    assert not cell.support and "not judged" in cell.note


def test_e1_outcome():
    sup = P.E1Cell(True, False, 5, 0, 5, 5, ())
    ref = P.E1Cell(False, True, 5, 5, 0, 5, (1,))
    neither = P.E1Cell(False, False, 2, 0, 2, 5, ())
    assert P.e1_outcome([False, False, False], None) == "null"
    assert P.e1_outcome([], None) == "pending"
    assert P.e1_outcome([True, False], None) == "pending"
    assert P.e1_outcome([True], [sup, neither]) == "support"
    assert P.e1_outcome([True], [ref]) == "refutation"
    assert P.e1_outcome([True], [sup, ref]) == "support and refutation"
    assert P.e1_outcome([True], [neither]) == "neither"
    assert P.e1_outcome([True], []) == "neither"  # no SAT-active cell to judge


def test_slope_and_its_interval():
    exact = P.slope([(0, 1.0), (1, 3.0), (2, 5.0)])
    assert exact.slope == pytest.approx(2.0) and exact.lower == pytest.approx(2.0) and exact.sign == "+"
    pts = [(0, 0.0), (0, 0.02), (3, 0.01), (3, 0.03), (5, 0.0), (5, 0.04)]
    s = P.slope(pts)
    # by hand: xbar = 8/3, Sxx = 2 * (64/9 + 1/9 + 49/9) = 228/9
    sxx = 228 / 9
    b = sum((x - 8 / 3) * y for x, y in pts) / sxx
    resid = [y - (sum(v for _, v in pts) / 6 + b * (x - 8 / 3)) for x, y in pts]
    se = math.sqrt(sum(r * r for r in resid) / 4 / sxx)
    assert s.slope == pytest.approx(b)
    assert s.upper - s.slope == pytest.approx(2.7764451 * se)
    assert s.sign is None  # the interval contains 0


def test_e2_slope_leaves_out_inert_cells_only():
    diffs = {1: {0: 0.0, 1: 0.0}, 8: {0: 0.03, 1: 0.03}, 32: {0: 5.0, 1: 5.0}}
    kept = P.e2_slope(diffs, {1: P.ACTIVE, 8: P.BORDERLINE, 32: P.INERT})
    assert kept.n == 4 and kept.slope == pytest.approx(0.01)
    assert P.e2_slope(diffs, {}).n == 6
    assert P.e2_slope(diffs, {8: P.INERT, 32: P.INERT}) is None  # one lag left
