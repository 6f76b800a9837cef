"""SATConfig validation: every invalid value raises SATConfigError naming the key and the value."""

from __future__ import annotations

import math

import pytest

from sat_ext.core import SATConfig, SATConfigError

NAN, INF = float("nan"), float("inf")

INVALID = [
    ("quantile", 0.0),
    ("quantile", 0),
    ("quantile", 1.0),
    ("quantile", 1),
    ("quantile", NAN),
    ("quantile", -0.5),
    ("quantile", 1.5),
    ("quantile", INF),
    ("quantile", True),
    ("quantile", "0.9"),
    ("quantile", None),
    ("eps_low", -0.1),
    ("eps_low", 1.0),
    ("eps_low", 1.5),
    ("eps_low", NAN),
    ("eps_low", INF),
    ("eps_low", True),
    ("eps_low", "0.2"),
    ("eps_high", -0.2),
    ("eps_high", -1e-12),
    ("eps_high", NAN),
    ("eps_high", INF),
    ("eps_high", False),
    ("eps_high", None),
    ("dual_clip", 1.0),
    ("dual_clip", 0.5),
    ("dual_clip", -3.0),
    ("dual_clip", NAN),
    ("dual_clip", INF),
    ("dual_clip", True),
    ("dual_clip", "3"),
    ("exponent", 0.0),
    ("exponent", -2.0),
    ("exponent", NAN),
    ("exponent", INF),
    ("exponent", True),
    ("c_min", -0.1),
    ("c_min", 1.1),
    ("c_min", NAN),
    ("c_min", True),
    ("c_min", False),
    ("c_min", None),
    ("kernel", "gauss"),
    ("kernel", "Hill"),
    ("kernel", None),
    ("kernel", 2),
    ("gate_scope", "local"),
    ("gate_scope", "GLOBAL"),
    ("gate_scope", None),
    ("global_method", "approx"),
    ("global_method", ""),
    ("proxy", "recompute"),
    ("proxy", None),
    ("gspo_gate_level", "seq"),
    ("gspo_gate_level", "tokens"),
    ("nonfinite", "ignore"),
    ("nonfinite", "MASK"),
]


def _names_value(msg: str, value) -> bool:
    if isinstance(value, float) and math.isnan(value):
        return "nan" in msg
    return repr(value) in msg


@pytest.mark.parametrize("key,value", INVALID, ids=[f"{k}={v!r}" for k, v in INVALID])
def test_invalid_value_raises_naming_key_and_value(key, value):
    with pytest.raises(SATConfigError) as ei:
        SATConfig(**{key: value})
    e = ei.value
    assert isinstance(e, ValueError)
    assert e.key == key
    assert e.value is value or (isinstance(value, float) and math.isnan(value) and math.isnan(e.value))
    msg = str(e)
    assert key in msg and _names_value(msg, value), msg


@pytest.mark.parametrize("key,value", INVALID[::3], ids=[f"{k}={v!r}" for k, v in INVALID[::3]])
def test_from_mapping_respells_the_key(key, value):
    path = lambda k: f"actor_rollout_ref.actor.policy_loss.sat.{k}"  # noqa: E731
    with pytest.raises(SATConfigError) as ei:
        SATConfig.from_mapping({key: value}, key_of=path)
    assert ei.value.key == path(key)
    assert path(key) in str(ei.value) and _names_value(str(ei.value), value)


def test_from_mapping_unknown_key():
    with pytest.raises(SATConfigError) as ei:
        SATConfig.from_mapping({"quantil": 0.9})
    assert ei.value.key == "quantil" and "quantil" in str(ei.value) and "0.9" in str(ei.value)
    with pytest.raises(SATConfigError) as ei:
        SATConfig.from_mapping({"eps_low": 0.2, "radius": 0.1}, key_of=lambda k: f"--sat.{k.replace('_', '-')}")
    assert ei.value.key == "--sat.radius" and "--sat.radius" in str(ei.value)


def test_from_mapping_valid_and_round_trip():
    cfg = SATConfig.from_mapping({"quantile": 0.8, "kernel": "exp", "dual_clip": None, "c_min": 1})
    assert (cfg.quantile, cfg.kernel, cfg.dual_clip, cfg.c_min) == (0.8, "exp", None, 1)
    assert SATConfig.from_mapping(cfg.to_dict()) == cfg
    assert SATConfig.from_mapping({}) == SATConfig()


def test_renamed_keeps_value_and_reason():
    e = SATConfigError("quantile", 2.0, "must be a number strictly between 0 and 1")
    r = e.renamed(lambda k: "x." + k)
    assert (r.key, r.value, r.reason) == ("x.quantile", 2.0, e.reason)
    assert str(r).startswith("x.quantile ")


VALID = [
    {},
    {"eps_low": 0.0, "eps_high": 0.0},
    {"eps_low": 0.999},
    {"eps_high": 10.0},
    {"dual_clip": None},
    {"dual_clip": 1.0000001},
    {"quantile": 1e-9},
    {"quantile": 0.999999},
    {"c_min": 0},
    {"c_min": 1},
    {"c_min": 1.0},
    {"exponent": 1e-3},
    {"exponent": 1},
    {"eps_low": 3e-4, "eps_high": 4e-4},
    *[{"kernel": k} for k in ("hill_shifted", "hill", "power", "exp")],
    {"gate_scope": "global", "global_method": "hist"},
    {"proxy": "rollout"},
    {"gspo_gate_level": "token"},
    {"nonfinite": "raise"},
]


@pytest.mark.parametrize("kw", VALID, ids=[str(k) for k in VALID])
def test_valid_values_accepted(kw):
    cfg = SATConfig(**kw)
    for k, v in kw.items():
        assert getattr(cfg, k) == v


def test_defaults_are_the_papers():
    cfg = SATConfig()
    assert (cfg.eps_low, cfg.eps_high, cfg.quantile, cfg.exponent) == (0.2, 0.2, 0.9, 2.0)
    assert (cfg.kernel, cfg.gate_scope, cfg.c_min, cfg.proxy) == ("hill", "micro", 0.0, "old")
    assert (cfg.quantile_rule, cfg.gspo_gate_level) == ("inverse_cdf", "broadcast")


def test_frozen():
    with pytest.raises(Exception):
        SATConfig().quantile = 0.5  # type: ignore[misc]
