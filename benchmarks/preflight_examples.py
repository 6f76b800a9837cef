"""Every shipped example variant through ``sat-ext preflight``: the kept run of benchmarks/results/preflight/.

    python benchmarks/preflight_examples.py --out /tmp/preflight_all [--keep benchmarks/results/preflight]

Runs the three commands below (the 26 verl Table 1 variants with R3 allowed as not checked, the small recipe's 8,
the OpenRLHF example's 10 rows), each into ``<out>/<name>``, then writes ``<keep>/README.md`` (one row per
target: steps, factor, seconds, checks passed, keys not checked) and keeps each target's ``checks.txt``,
``substitutions.md`` and ``metrics.jsonl`` with each command's ``summary.json`` / ``summary.md`` (the console
logs, rollout dumps, data and checkpoints stay in ``<out>``). Exit code 1 if a target failed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from _common import command_line, env_lines, environment

R3 = ("actor_rollout_ref.actor.megatron.router_replay.mode", "actor_rollout_ref.rollout.enable_rollout_routing_replay")
COMMANDS = {
    "verl_aime_qwen3_30b": ["verl", "verl_aime_qwen3_30b", *(a for k in R3 for a in ("--allow-unchecked", k))],
    "verl_small_qwen3_1p7b": ["verl", "verl_small_qwen3_1p7b"],
    "openrlhf_aime_qwen3_30b": ["openrlhf", "openrlhf_aime_qwen3_30b"],
}
KEPT = ("checks.txt", "substitutions.md", "metrics.jsonl")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="a new folder for the runs")
    p.add_argument("--keep", type=Path, default=None, help="copy the kept files and the README table here")
    p.add_argument("--only", default=None, help="comma-separated names of COMMANDS (default: all)")
    args = p.parse_args(argv)
    env = environment(torch.device("cpu"))
    names = args.only.split(",") if args.only else list(COMMANDS)
    rows, failed, start = [], 0, time.monotonic()
    for name in names:
        out = args.out / name
        command = [sys.executable, "-m", "sat_ext.cli", "preflight", *COMMANDS[name], "--out", str(out)]
        print(f"[preflight_examples] {' '.join(command[2:])}", flush=True)
        code = subprocess.run(command).returncode
        summary = json.loads((out / "summary.json").read_text())
        failed += code != 0
        for target, t in summary["targets"].items():
            ok = sum(c["result"] != "FAIL" for c in t["checks"])
            not_checked = ", ".join(k.rsplit(".", 1)[-1] for k in t["unchecked"]) or "-"
            rows.append(
                f"| {target} | {'PASS' if t['passed'] else 'FAIL'} | {t['steps']} | {t['factor']} | "
                f"{t['seconds']:.0f} | {ok}/{len(t['checks'])} | {not_checked} |"
            )
            if args.keep:
                for file in KEPT:
                    dest = args.keep / target / file
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(out / target / file, dest)
        if args.keep:
            for file in ("summary.json", "summary.md"):
                shutil.copy(out / file, args.keep / name / file)
    if args.keep:
        minutes = (time.monotonic() - start) / 60
        head = [
            "# Every shipped example variant through `sat-ext preflight`",
            "",
            f"`{command_line(__file__, argv)}` ({minutes:.0f} minutes). Per target: `checks.txt`,",
            "`substitutions.md`, `metrics.jsonl`; per command: `summary.json`, `summary.md` (docs/preflight.md says",
            "what is substituted and checked).",
            "",
            "```",
            *env_lines(env),
            "```",
            "",
            "| target | result | steps | factor | seconds | checks passed | not checked |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        (args.keep / "README.md").write_text("\n".join(head + rows) + "\n")
    print(f"[preflight_examples] {len(rows)} targets, {failed} command(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
