"""``python -m sat_ext.openrlhf.train_ppo_ray <openrlhf flags>``: OpenRLHF 0.11.2's ``train_ppo_ray`` with SAT.

It runs OpenRLHF's own ``openrlhf.cli.train_ppo_ray`` module, unchanged, with ``runpy`` (so all of its
parsing, validation and ``train()`` are upstream's), plus the launcher's extensions:

1. before the module runs, each extension installs its class swaps (SAT: the policy actor class, which Ray
   ships to the actor workers, see :mod:`sat_ext.openrlhf.actor`; LAG: OpenRLHF's ``PPOTrainerAsync``);
2. when the module's parser parses, the extensions add their loss types to ``--actor.policy_loss_type``'s
   choices and their flags (SAT: ``sat``, ``sat_gspo``, ``--sat.*``; LAG: ``--lag.*``);
3. when the module calls its ``train(args)``, each extension first checks the final arguments (the ones
   the workers get) and refuses a bad configuration with a message naming the flag (exit status 2).

Every other flag reaches OpenRLHF untouched; with a non-SAT loss and no ``--sat.*`` or ``--lag.*`` flag the
run is plain OpenRLHF. :data:`EXTENSIONS` holds SAT, LAG, the asynchronous lag modes of :mod:`sat_ext.lag`
(:mod:`sat_ext.openrlhf.lag`, docs/openrlhf_lag.md), and AGENT, which adds nothing but the launch check of
OpenRLHF's ``--train.agent_func_path`` (:mod:`sat_ext.openrlhf.agent`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import runpy
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Sequence

from sat_ext.pinned import LOSS_NAMES, OPENRLHF

from . import _upstream
from . import lag as _lag
from .agent import check_agent_args
from .config import SAT_OPTION_CHOICES, SAT_OPTION_DEFAULTS, SAT_OPTIONS, check_openrlhf_args, sat_options

OPENRLHF_CLI = "openrlhf.cli.train_ppo_ray"
_LOSS_FLAG = "--actor.policy_loss_type"


@dataclass(frozen=True)
class Extension:
    """What one feature adds to OpenRLHF's CLI.

    ``check_args`` gets OpenRLHF's final arguments and raises ValueError to refuse them; ``install`` runs
    before OpenRLHF's CLI module does (swaps of classes that module or its Ray workers look up).
    """

    name: str
    loss_types: tuple[str, ...]
    add_arguments: Callable[[argparse.ArgumentParser], None]
    check_args: Callable[[SimpleNamespace], None]
    install: Callable[[], None]


_SAT_HELP = {
    "quantile": "gate level alpha: tokens whose |log-ratio| exceeds this quantile of the scope are contracted",
    "quantile_rule": "inverse_cdf (the paper's: the ceil(alpha n)-th smallest |d|) or linear (interpolated)",
    "gate_scope": "quantile over the micro-batch (the paper's) or over the data-parallel group",
    "global_method": "global scope: exact (two small all-reduces) or hist (one, q within 2^-7 relative)",
    "kernel": "contraction factor c = K(|d|; q) of gated tokens (hill: the paper's 1/(1+(|d|/q)^n))",
    "exponent": "exponent n of the kernel",
    "c_min": "floor on c; 1 disables the contraction (SAT == PPO/GSPO)",
    "gspo_gate_level": "sat_gspo: broadcast (the paper's: the sequence log-ratio on every token, token "
    "quantile), sequence (per-sequence quantile) or token (each token's own log-ratio)",
    "nonfinite": "NaN/Inf inputs at active tokens: mask (zero loss, counted) or raise",
}


def _add_sat_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "SAT (sat_ext)",
        "with --actor.policy_loss_type sat|sat_gspo; radii from --actor.eps_clip_low_high, "
        "dual clip from --actor.dual_clip",
    )
    for name in SAT_OPTIONS:
        default = SAT_OPTION_DEFAULTS[name]
        group.add_argument(
            f"--sat.{name}",
            type=type(default),
            choices=SAT_OPTION_CHOICES.get(name),
            default=argparse.SUPPRESS,  # absent flags leave OpenRLHF's namespace without a `sat` entry
            help=f"{_SAT_HELP[name]} (default {default})",
        )


def _check_sat_args(args: SimpleNamespace) -> None:
    options = sat_options(args)
    if args.actor.policy_loss_type not in LOSS_NAMES:
        if options:
            flags = " ".join(f"--sat.{name}" for name in options)
            raise ValueError(
                f"{flags} set, but {_LOSS_FLAG} is {args.actor.policy_loss_type!r}, not a SAT loss "
                f"({', '.join(LOSS_NAMES)})"
            )
        return
    check_openrlhf_args(args, options, key_of=lambda name: f"--sat.{name}")
    print(
        f"[sat_ext] {_LOSS_FLAG} {args.actor.policy_loss_type}: ratio against vLLM's rollout log-probs; "
        "OpenRLHF's IS correction (--algo.advantage.is_correction_mode/gating/threshold) is not applied"
    )


def _install_sat() -> None:
    from .actor import install

    install()


SAT = Extension("sat", LOSS_NAMES, _add_sat_arguments, _check_sat_args, _install_sat)
LAG = Extension("lag", (), _lag.add_lag_arguments, _lag.check_lag_args, _lag.install)  # sat_ext.openrlhf.lag
# OpenRLHF's own --train.agent_func_path, checked before Ray starts (sat_ext.openrlhf.agent): no flag, no swap
AGENT = Extension("agent", (), lambda parser: None, check_agent_args, lambda: None)
EXTENSIONS: tuple[Extension, ...] = (SAT, LAG, AGENT)


def _extend_parser(parser: argparse.ArgumentParser, extensions: Sequence[Extension]) -> None:
    loss_flag = _upstream.option_action(parser, _LOSS_FLAG)
    if loss_flag.choices is not None:  # None with the registry patch: OpenRLHF then validates the name itself
        loss_flag.choices = [*loss_flag.choices, *(t for ext in extensions for t in ext.loss_types)]
    for ext in extensions:
        ext.add_arguments(parser)


def _wrap_train(parser: argparse.ArgumentParser, extensions: Sequence[Extension]) -> None:
    """Put the extensions' checks in front of the ``train`` that OpenRLHF's ``__main__`` block calls next."""
    main_globals = sys.modules["__main__"].__dict__
    openrlhf_train = main_globals.get("train")
    if not callable(openrlhf_train):
        raise RuntimeError(f"{OPENRLHF_CLI} has no train() in its module namespace: not OpenRLHF {OPENRLHF}")

    def train(args):
        for ext in extensions:
            try:
                ext.check_args(args)
            except ValueError as e:
                parser.exit(2, f"{parser.prog}: error: {e}\n")
        return openrlhf_train(args)

    main_globals["train"] = train


def main(argv: Sequence[str] | None = None, extensions: Sequence[Extension] = EXTENSIONS) -> None:
    """Run OpenRLHF's ``train_ppo_ray`` on ``argv`` (default: ``sys.argv[1:]``) with ``extensions``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    found = importlib.metadata.version("openrlhf")
    if found != OPENRLHF:
        raise SystemExit(
            f"sat_ext.openrlhf supports openrlhf=={OPENRLHF} (the PolicyLoss API, the actor "
            f"class and the CLI it adapts), found {found}"
        )
    for ext in extensions:
        ext.install()

    parse_args = argparse.ArgumentParser.parse_args
    hooked = []

    def parse_args_with_extensions(parser, args=None, namespace=None):
        if _upstream.option_action(parser, _LOSS_FLAG) is None:  # some other parser
            return parse_args(parser, args, namespace)
        argparse.ArgumentParser.parse_args = parse_args
        hooked.append(parser)
        _extend_parser(parser, extensions)
        parsed = parse_args(parser, args, namespace)
        _wrap_train(parser, extensions)
        return parsed

    saved_argv = sys.argv
    argparse.ArgumentParser.parse_args = parse_args_with_extensions
    sys.argv = [OPENRLHF_CLI, *argv]
    try:
        runpy.run_module(OPENRLHF_CLI, run_name="__main__", alter_sys=True)
    finally:
        argparse.ArgumentParser.parse_args = parse_args
        sys.argv = saved_argv
    if not hooked:
        raise RuntimeError(f"{OPENRLHF_CLI} never parsed its arguments: not OpenRLHF {OPENRLHF}")


if __name__ == "__main__":
    main()
