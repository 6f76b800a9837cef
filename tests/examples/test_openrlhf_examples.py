"""The OpenRLHF example (examples/openrlhf_aime_qwen3_30b): its commands through the real OpenRLHF 0.11.2
parser via sat_ext's launcher (in a subprocess, stopped where training would start), and its reward file."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _background import Background

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "openrlhf_aime_qwen3_30b"
HERE = Path(__file__).resolve().parent
HARNESS = HERE / "_openrlhf_examples_harness.py"
STUBS = REPO / "tests" / "openrlhf" / "_openrlhf_stubs.py"
VARIANTS = ("sat_grpo", "sat_gspo", "gspo", "grpo", "grpo_tis")
LAGS = (1, 8)


def _command(variant: str, lag: int, *extra: str, **env: str) -> list[str]:
    out = subprocess.run(
        ["bash", str(EXAMPLE / "run.sh"), variant, str(lag), *extra],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SAT_DRY_RUN": "1", **env},
    )
    return out.stdout.splitlines()


def test_run_sh_command_shape(tmp_path):
    data = tmp_path / "data" / "openrlhf"
    data.mkdir(parents=True)
    (data / "train.jsonl").write_text("{}\n" * 1000)
    cmd = _command("sat_gspo", 8, "--sat.quantile", "0.8", SAT_DATA_DIR=str(tmp_path / "data"), PYTHON="py")
    assert cmd[:3] == ["py", "-m", "sat_ext.openrlhf.train_ppo_ray"]
    assert cmd[-2:] == ["--sat.quantile", "0.8"]  # user flags last: they win in argparse
    # 544 optimizer steps x 256 prompts over a 1000-prompt set -> 140 episodes
    assert cmd[cmd.index("--train.num_episodes") + 1] == "140"
    for bad in (["nope"], ["sat", "3"]):
        res = subprocess.run(["bash", str(EXAMPLE / "run.sh"), *bad], capture_output=True, text=True)
        assert res.returncode == 2


def _cases() -> dict[str, list[str]]:
    cases = {f"{v}_lag{lag}": _command(v, lag)[3:] for v in VARIANTS for lag in LAGS}
    cases["sat_alias"] = _command("sat", 8)[3:]
    cases["sat_quantile_override"] = _command("sat", 1, "--sat.quantile", "0.75")[3:]
    cases["sat_without_rollout_logprobs"] = _command("sat", 1, "--algo.advantage.is_correction_level", "off")[3:]
    return cases


def _can_run_harness() -> bool:
    return (
        importlib.util.find_spec("openrlhf") is not None
        and STUBS.exists()
        and importlib.util.find_spec("sat_ext.openrlhf.train_ppo_ray") is not None
    )


def start_background() -> Background:
    """OpenRLHF's real CLI through the launcher on every example command (a fresh process: see the harness)."""
    if not _can_run_harness():
        pytest.skip("openrlhf, sat_ext.openrlhf's launcher or tests/openrlhf/_openrlhf_stubs.py is missing")
    argv = [sys.executable, str(HARNESS), "in.json", "out.json"]
    return Background(argv, inputs={"in.json": json.dumps(_cases())})


@pytest.fixture(scope="module")
def parsed(background):
    assert background.wait(timeout=300) == 0, background.tail()
    return json.loads((background.workdir / "out.json").read_text())


def _args(parsed, case):
    result = parsed[case]
    assert result["outcome"] == "train", result["stderr"][-2000:]
    return result["args"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("lag", LAGS)
def test_example_flags_pass_openrlhfs_parser_and_sats_checks(parsed, variant, lag):
    a = _args(parsed, f"{variant}_lag{lag}")
    loss = {"sat_grpo": "sat", "sat_gspo": "sat_gspo", "gspo": "gspo", "grpo": "ppo", "grpo_tis": "ppo"}[variant]
    assert a["actor"]["policy_loss_type"] == loss
    assert a["actor"]["eps_clip_low_high"] == [0.2, 0.2]  # the paper's radii for every method (Table 9)
    assert a["actor"]["loss_agg_mode"] == ("seq-mean-token-mean" if "gspo" in variant else "token-mean")
    assert a["actor"]["dual_clip"] == (None if "gspo" in variant else 3.0)
    # rollout log-probs reach the loss (SAT's reference), vLLM engines exist, GRPO advantages, no KL / ref
    assert a["algo"]["advantage"]["is_correction_level"] == "token" and a["vllm"]["num_engines"] == 8
    adv, kl = a["algo"]["advantage"], a["algo"]["kl"]
    assert adv["estimator"] == "group_norm"
    # the paper's KL loss (App. F): low-variance KL (k3) at 1e-3, the reference model on the actor's GPUs
    assert (kl["use_loss"], kl["estimator"], kl["init_coef"]) == (True, "k3", 1e-3)
    assert a["train"]["colocate_actor_ref"] and (a["ref"]["num_nodes"], a["ref"]["num_gpus_per_node"]) == (4, 8)
    assert a["actor"]["entropy_coef"] == 0
    # the paper's optimizer: Adam (0.9, 0.98), constant lr 1e-6, no warm-up, no weight decay
    opt = a["actor"]["adam"]
    assert (opt["lr"], opt["betas"], opt["weight_decay"]) == (1e-6, [0.9, 0.98], 0.0)
    assert (a["actor"]["lr_scheduler"], a["actor"]["lr_warmup_ratio"]) == ("constant", 0)
    # OpenRLHF's IS correction on its ppo loss: ICEPOP mask for grpo, TIS (truncated at 2) for grpo_tis
    mode = {"grpo": ("mask", [0.5, 5.0]), "grpo_tis": ("clip", [0.0, 2.0])}.get(variant)
    if mode:
        assert (adv["is_correction_mode"], adv["is_correction_threshold"], adv["is_correction_gating"]) == (
            *mode,
            "ratio",
        )
    # the paper's batch: 256 prompts x 16 samples per optimizer step; one rollout batch = one optimizer step
    r, t = a["rollout"], a["train"]
    assert (r["batch_size"], r["n_samples_per_prompt"], t["batch_size"]) == (256, 16, 4096)
    assert t["max_epochs"] == 1
    assert (r["temperature"], r["top_p"], r["max_new_tokens"]) == (1.0, 1.0, 32768)  # App. F
    assert a["data"]["max_len"] >= 32768 + 2048
    # asynchronous with sat_ext's lag modes: lag 1 = bounded at 1, lag 8 = a broadcast every 8 steps with the
    # rollout one batch ahead (data 1..8 steps old, the paper's and the verl example's schedule); the launcher
    # resolved OpenRLHF's queue to one batch (lag 1) and two (lag 8: prefetch 1 with evaluation on)
    expected_lag = {"mode": "bounded", "max_lag": 1} if lag == 1 else {"mode": "interval", "interval": 8, "prefetch": 1}
    assert a["lag"] == expected_lag
    assert (
        f"[sat_ext] --lag.mode {expected_lag['mode']}:" in parsed[f"{variant}_lag{lag}"]["stdout"]
        and "lag metrics under lag/" in parsed[f"{variant}_lag{lag}"]["stdout"]
    )
    assert (
        t["async_enable"] is True
        and t["async_queue_size"] == {1: 1, 8: 2}[lag]
        and t["partial_rollout_enable"] is False
    )
    assert a["rollout"]["vllm_generate_batch_size"] == r["batch_size"]  # no oversampling: the lag stays bounded
    # eval: the mean over 64 samples per problem (App. F) every 5 optimizer steps (lag 1) / after every broadcast
    assert (a["eval"]["n_samples_per_prompt"], a["eval"]["temperature"]) == (64, 1.0)
    assert a["eval"]["steps"] == (5 if lag == 1 else 8)
    assert a["ckpt"]["save_steps"] % lag == 0  # lag 8: checkpoints (and resumes) at broadcast steps
    assert a["reward"]["remote_url"] == [str(EXAMPLE / "math_reward.py")]
    assert (a["data"]["input_key"], a["data"]["label_key"], a["data"]["apply_chat_template"]) == (
        "prompt",
        "label",
        True,
    )
    if variant.startswith("sat"):
        expected = {
            "quantile": 0.9,
            "quantile_rule": "inverse_cdf",
            "gate_scope": "micro",
            "kernel": "hill",
            "exponent": 2.0,
            "c_min": 0.0,
            "nonfinite": "mask",
        }
        if variant == "sat_gspo":
            expected["gspo_gate_level"] = "broadcast"
        assert a["sat"] == expected
    else:
        assert "sat" not in a


def test_sat_config_built_from_the_example_flags(parsed):
    from sat_ext.core import SATConfig
    from sat_ext.openrlhf.config import sat_config

    a = _args(parsed, "sat_grpo_lag1")
    assert _args(parsed, "sat_alias") == _args(parsed, "sat_grpo_lag8") | {
        "ckpt": _args(parsed, "sat_alias")["ckpt"],
        "logger": _args(parsed, "sat_alias")["logger"],
    }
    cfg = sat_config(*a["actor"]["eps_clip_low_high"], a["actor"]["dual_clip"], a["sat"])
    assert cfg == SATConfig(eps_low=0.2, eps_high=0.2, dual_clip=3.0, quantile=0.9)
    assert _args(parsed, "sat_quantile_override")["sat"]["quantile"] == 0.75


def test_the_launcher_refuses_the_example_without_rollout_logprobs(parsed):
    result = parsed["sat_without_rollout_logprobs"]
    assert (result["outcome"], result["code"]) == ("exit", 2)
    assert "--algo.advantage.is_correction_level" in result["stderr"]
