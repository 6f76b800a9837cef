"""Per-turn version records and the per-token lag metrics (sat_ext.lag.turns)."""

from __future__ import annotations

import pytest

from sat_ext.lag import VersionSpan
from sat_ext.lag.turns import TokenLagMetrics, Trajectory, parse_turns, token_lags, trim_turns

EDGES = (0, 1, 2, 4)


def _turns(*raw):
    return parse_turns([list(t) for t in raw], "test")


@pytest.mark.parametrize("bad", [[3, 2, 1], [3, -1, 0], [3, 0], ["3", 0, 0], [True, 0, 0], 7])
def test_a_bad_record_is_named(bad):
    with pytest.raises(ValueError, match="trajectory k turn 0") as err:
        parse_turns([bad], "trajectory k")
    assert repr(bad) in str(err.value)


def test_a_record_that_is_not_a_list_is_named():
    with pytest.raises(ValueError, match="trajectory k: sat_ext_turns must be a list"):
        parse_turns({"a": 1}, "trajectory k")


def test_trim_keeps_the_generated_prefix():
    turns = _turns((5, 0, 0), (4, 1, 1), (6, 1, 2))
    assert trim_turns(turns, 15) == list(turns)
    assert [t.as_list() for t in trim_turns(turns, 7)] == [[5, 0, 0], [2, 1, 1]]
    assert trim_turns(turns, 0) == []


def test_a_token_lag_is_the_trainer_version_minus_its_turns_oldest():
    assert token_lags(3, _turns((5, 0, 0), (4, 1, 2), (6, 3, 3))) == {3: 5, 2: 4, 0: 6}
    with pytest.raises(ValueError):
        token_lags(1, _turns((5, 0, 2)))  # trained on before its newest version existed


def test_metrics_of_a_step():
    m = TokenLagMetrics(EDGES)
    assert m.flush() == {}
    m.record_batch(
        3,
        [
            Trajectory(_turns((5, 0, 0), (4, 1, 2), (6, 3, 3)), 15, VersionSpan(0, 3)),
            Trajectory(_turns((2, 2, 2)), 2, VersionSpan(1, 2)),  # tags disagree with the turns
            Trajectory(None, 7, VersionSpan(3, 3)),  # no record
            Trajectory(_turns((3, 3, 3)), 4, VersionSpan(3, 3)),  # one token not covered
        ],
    )
    m.record_batch(4, [Trajectory(_turns((8, 3, 4)), 8, VersionSpan(3, 4))])
    out = m.flush()
    assert out == {
        "lag/token_hist/0": 9.0,  # 6 + 3 at version 3
        "lag/token_hist/1": 10.0,  # 2 at version 3, 8 at version 4
        "lag/token_hist/2-3": 9.0,  # 4 (lag 2) + 5 (lag 3)
        "lag/token_hist/4+": 0.0,
        "lag/token_lag/min": 0.0,
        "lag/token_lag/mean": (0 * 9 + 1 * 10 + 2 * 4 + 3 * 5) / 28,
        "lag/token_lag/max": 3.0,
        "lag/token_lag_spread/max": 3.0,
        "lag/split_turn_tokens": 12.0,  # 4 + 8
        "lag/token_unrecorded": 8.0,  # 7 + 1
        "lag/turn_tag_mismatch": 1.0,
    }
    assert m.flush() == {}
