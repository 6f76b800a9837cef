"""The READMEs' variant counts and evaluation settings against the configs (issue #23: the top README said 14
variants and avg@8 every 8 steps while the configs had 26 and mean@64), and sat-ext check-run's reading of a
variant's evaluation count (YAML only) against Hydra's composition. Cost: ~15 s (composes 34 variants)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("verl")

from test_verl_examples import compose_variants  # noqa: E402

from sat_ext.example_configs import config_dir, example_for_project, variant_setting, variants  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
BIG, SMALL, OPENRLHF = "verl_aime_qwen3_30b", "verl_small_qwen3_1p7b", "openrlhf_aime_qwen3_30b"
CHECKED = {
    "actor_rollout_ref.rollout.val_kwargs.n",
    "trainer.test_freq",
    "trainer.project_name",
    "trainer.v1.separate_async.parameter_sync_step",
}


def _text(path: str) -> str:
    return re.sub(r"\s+", " ", (REPO / path).read_text())  # sentences wrap across lines


@pytest.fixture(scope="module")
def settings() -> dict[str, dict[str, dict]]:
    """example -> variant -> {key: value} as Hydra composes it."""
    out = {}
    for name in (BIG, SMALL):
        composed = compose_variants(config_dir(name, EXAMPLES), variants(name, EXAMPLES))
        out[name] = {v: {key: _select(cfg, key) for key in CHECKED} for v, cfg in composed.items()}
    return out


def _select(cfg, key: str):
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key)


def _eval(settings: dict, name: str) -> tuple[int, dict[int, int]]:
    """(samples per problem, {lag: optimizer steps between evaluations}) of an example, one value each."""
    ns = {s["actor_rollout_ref.rollout.val_kwargs.n"] for s in settings[name].values()}
    every: dict[int, set[int]] = {}
    for variant, s in settings[name].items():
        lag = int(variant.rsplit("_lag", 1)[1])
        every.setdefault(lag, set()).add(s["trainer.test_freq"] * s["trainer.v1.separate_async.parameter_sync_step"])
    assert len(ns) == 1 and all(len(v) == 1 for v in every.values()), (ns, every)
    return ns.pop(), {lag: v.pop() for lag, v in every.items()}


def test_the_checkers_reading_of_a_variant_is_hydras(settings):
    """sat-ext check-run reads the documented count from the YAML files alone (no verl needed): the same values."""
    for name, per_variant in settings.items():
        for variant, values in per_variant.items():
            for key, value in values.items():
                assert variant_setting(name, variant, key, EXAMPLES) == value, (name, variant, key)
        assert example_for_project(next(iter(per_variant.values()))["trainer.project_name"], EXAMPLES) == name


def test_the_30b_example_is_documented_as_configured(settings):
    n, every = _eval(settings, BIG)
    assert (n, every) == (64, {1: 5, 8: 8})  # App. F: 64 = 4 runs x 16, every 5; lag 8 between broadcasts
    count = len(settings[BIG])
    readme = _text(f"examples/{BIG}/README.md")
    assert f"all {count} variants" in readme and f"val-core/aime2024/acc/mean@{n}" in readme
    assert f"every {every[1]} optimizer steps at lag 1** (`test_freq` {every[1]}" in readme
    assert f"every {every[8]} at lag 8** (`test_freq` 1" in readme
    top = _text("README.md")
    assert re.findall(r"(\d+) one-command variants", top) == [str(count)]
    assert (
        f"mean over {n} samples per problem every {every[1]} optimizer steps at lag 1 and every {every[8]} at "
        "lag 8" in top
    )
    assert f"at lag 1 and lag 8: {count} variants" in _text("examples/README.md")


def test_the_small_recipe_is_documented_as_configured(settings):
    n, every = _eval(settings, SMALL)
    assert len(set(every.values())) == 1
    count, k = len(settings[SMALL]), every[1]
    readme = _text(f"examples/{SMALL}/README.md")
    assert f"the {count} variants" in readme
    assert f"AIME24 avg@{n} (`val-core/aime2024/acc/mean@{n}`;" in readme
    assert f"every {k} optimizer steps at both" in readme
    top = _text("README.md")
    assert (
        f"{count} variants (GRPO, GSPO, SAT-GRPO, SAT-GSPO at lag 1 and lag 8), AIME 2024 avg@{n} every {k} steps"
    ) in top


def test_the_openrlhf_example_is_documented_as_run_sh_sets_it(settings):
    run_sh = (EXAMPLES / OPENRLHF / "run.sh").read_text()
    n = int(re.search(r"--eval\.n_samples_per_prompt (\d+)", run_sh)[1])
    steps = {int(lag): int(k) for lag, k in re.findall(r"^\s+(\d)\) EVAL_STEPS=(\d+);", run_sh, re.M)}
    assert (n, steps) == _eval(settings, BIG)  # the same evaluation as the verl example
    readme = _text(f"examples/{OPENRLHF}/README.md")
    assert f"`--eval.n_samples_per_prompt {n}`" in readme
    assert f"every {steps[1]} optimizer steps (lag 1) or {steps[8]} (lag 8)" in readme
    assert "avg@8" not in readme and "lags 0..7" not in readme
    sat_md = _text("docs/sat.md")
    assert "no KL; temperature 0.95" not in sat_md and f"AIME24 mean over {n} samples" in sat_md
