"""What the OpenRLHF CLI harnesses (tests/openrlhf/_openrlhf_harness.py, tests/examples/_openrlhf_examples_harness.py)
and their tests share: stopping OpenRLHF's CLI where training would start, and reading a case's outcome."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

# OpenRLHF 0.11.2's default wandb run name is the parse time to the minute (cli/train_ppo_ray.py, "ppo_%m%dT%H:%M")
_DEFAULT_RUN_NAME = re.compile(r"ppo_\d{4}T\d{2}:\d{2}")


class Stop(Exception):
    """Raised where OpenRLHF's CLI would start training."""


def plain(x: Any) -> Any:
    """OpenRLHF's hierarchical args (nested SimpleNamespaces) as JSON-able dicts and lists."""
    if isinstance(x, SimpleNamespace):
        return {k: plain(v) for k, v in vars(x).items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def trained(cli: dict, case: str) -> dict:
    """The args of a case the CLI accepted (it reached training), or fail with its stderr."""
    result = cli[case]
    assert result["outcome"] == "train", result["stderr"][-2000:]
    return result["args"]


def clockless(args: dict) -> dict:
    """``args`` with OpenRLHF's default wandb run name (the minute the CLI parsed them) as ``ppo_<time>``, so that
    two cases parsed on either side of a minute compare equal; any other run name is kept."""
    wandb = args.get("logger", {}).get("wandb", {})
    if _DEFAULT_RUN_NAME.fullmatch(str(wandb.get("run_name"))):
        args = {**args, "logger": {**args["logger"], "wandb": {**wandb, "run_name": "ppo_<time>"}}}
    return args


def refused(cli: dict, case: str) -> str:
    """The last stderr line of a case the CLI refused (argparse's exit code 2), or fail."""
    result = cli[case]
    assert (result["outcome"], result["code"]) == ("exit", 2), result
    return result["stderr"].strip().splitlines()[-1]
