"""``sat-ext preflight``'s bad input: each refused with exit code 2 and a message naming it, before anything starts
(no run folder, no model, no Ray)."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from sat_ext.preflight.cli import main  # noqa: E402

R3_MODE = "actor_rollout_ref.actor.megatron.router_replay.mode"
R3_ROLLOUT = "actor_rollout_ref.rollout.enable_rollout_routing_replay"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["verl", "verl_aime_qwen3_30b/sat_gspo_lag9"], "has no variant 'sat_gspo_lag9'; known: dppo_tv_lag1"),
        (["verl", "no_such_example/x"], "TARGET 'no_such_example/x' is neither a shipped example variant"),
        (["verl", "/nowhere/my_run.yaml"], "TARGET '/nowhere/my_run.yaml': no such config file"),
        (
            ["verl", "verl_small_qwen3_1p7b/sat_grpo_lag1", "method=nope"],
            "does not compose with overrides ['method=nope']",
        ),
        (["verl", "verl_small_qwen3_1p7b/sat_grpo_lag1", "data.nope=1"], "Could not override 'data.nope'"),
        (
            ["verl", "verl_aime_qwen3_30b/sat_gspo_r3_lag8"],
            f"run without checking it only with --allow-unchecked {R3_MODE}",
        ),
        (
            ["verl", "verl_aime_qwen3_30b/sat_gspo_r3_lag8", "--allow-unchecked", R3_MODE],
            f"--allow-unchecked {R3_ROLLOUT}",
        ),
        (
            ["verl", "verl_small_qwen3_1p7b/sat_grpo_lag1", "--allow-unchecked", R3_MODE],
            f"--allow-unchecked ['{R3_MODE}']: no target has such an unchecked key",
        ),
        (["verl", "verl_small_qwen3_1p7b/sat_grpo_lag1", "--steps", "0"], "--steps must be >= 1, got 0"),
        (
            ["verl", "verl_small_qwen3_1p7b/sat_grpo_lag1", "--model", "keep", "--device", "cpu"],
            "--model keep needs a GPU",
        ),
        (["openrlhf", "openrlhf_aime_qwen3_30b/nope_lag1"], "run.sh refused it: run.sh: unknown variant 'nope'"),
        (["openrlhf", "openrlhf_aime_qwen3_30b/sat_gspo_lag3"], "run.sh: LAG must be 1 or 8, got '3'"),
        (["openrlhf", "verl_aime_qwen3_30b/sat_gspo_lag8"], "the OpenRLHF example is openrlhf_aime_qwen3_30b"),
    ],
)
def test_bad_input_is_named_before_anything_starts(argv, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()  # nothing was started or written


def test_an_out_folder_that_holds_an_earlier_run_is_refused(tmp_path, capsys):
    (tmp_path / "summary.json").write_text("{}")
    assert main(["verl", "verl_small_qwen3_1p7b/sat_grpo_lag1", "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path} holds an earlier run" in capsys.readouterr().err
