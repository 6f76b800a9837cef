"""The OpenRLHF preflight's command: every flag of the example's run.sh classified, only the machine's changed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sat_ext.example_configs import example_dir
from sat_ext.preflight import openrlhf_flags as F
from sat_ext.preflight.openrlhf_run import EXAMPLE, LAGS, ROWS, Loaded, _run_sh, default_steps, scale_factor
from sat_ext.preflight.verl_run import Options

CASES = [(v, lag) for v in ROWS for lag in LAGS]


def _flags(variant: str, lag: int) -> dict[str, list[str]]:
    return F.parse(_run_sh(Loaded(f"{EXAMPLE}/{variant}_lag{lag}", variant, lag, ()), {}))


def test_the_rows_are_run_shs_variants():
    text = (example_dir(EXAMPLE) / "run.sh").read_text()
    block = text[text.index('case "${VARIANT}" in') : text.index("esac")]
    labels = {name for m in re.finditer(r"^\s+([\w|]+)\)", block, flags=re.M) for name in m[1].split("|")}
    assert labels - {"sat"} == set(ROWS)  # `sat` is sat_grpo's alias (the same command)


@pytest.mark.parametrize("variant,lag", CASES)
def test_every_flag_of_run_sh_is_classified_and_the_algorithm_kept(variant, lag):
    flags = _flags(variant, lag)
    run = {"--actor.model_name_or_path": ["/tiny"], "--train.num_episodes": ["1"]}
    result = F.transform(flags, 32, run, {k: "why" for k in run})
    assert result.unclassified == []
    for flag, values in flags.items():
        if F.is_algorithm(flag):
            assert result.flags[flag] == values, flag
    assert F.value(result.flags, "--rollout.batch_size") == "8" and F.value(result.flags, "--train.batch_size") == "128"
    assert (
        F.value(result.flags, "--rollout.max_new_tokens") == "1024"
        and F.value(result.flags, "--data.max_len") == "1088"
    )
    # the ring of 2 is replaced: its share of the token budget goes into the one rank's
    assert F.value(result.flags, "--train.max_tokens_per_gpu") == str(36864 * 2 // 32)
    assert F.value(result.flags, "--ds.ring_attn_size") == "1" and "--vllm.enforce_eager" in result.flags
    assert F.value(result.flags, "--actor.num_gpus_per_node") == F.value(result.flags, "--ref.num_gpus_per_node") == "1"


def test_a_change_to_an_algorithm_flag_is_a_bug_that_raises():
    flags = _flags("sat_gspo", 8)
    with pytest.raises(RuntimeError, match="algorithm flag --sat.quantile"):
        F.transform(flags, 32, {"--sat.quantile": ["0.8"]}, {"--sat.quantile": "no"})


def test_steps_reach_the_bound_and_pass_the_first_evaluation():
    flags8, flags1 = _flags("sat_grpo", 8), _flags("sat_grpo", 1)
    from sat_ext.preflight.openrlhf_run import _lag

    assert default_steps(_lag(flags8), 8) == 17  # 2n + 1 with n = 8: evaluations at 8 and 16
    assert default_steps(_lag(flags1), 5) == 6  # bounded 1: L + 3 = 4, the evaluation at step 5 needs 6
    assert scale_factor(flags8, 38, None) == 32  # 2048 / 32 = 64 tokens of prompt budget
    assert Options("cpu", None, None, False).device == "cpu"


def test_flags_parse_back_to_the_same_command():
    argv = ["--a.b", "1", "--c", "--d.e", "0.9", "0.98"]
    assert F.unparse(F.parse(argv)) == argv
    with pytest.raises(ValueError, match="'x' comes before any --flag"):
        F.parse(["x", "--a"])
    assert Path(example_dir(EXAMPLE) / "math_reward.py").is_file()
