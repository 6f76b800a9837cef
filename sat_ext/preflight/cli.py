"""``sat-ext preflight verl|openrlhf TARGET [overrides ...]``: a user's config, or a shipped example, through the
framework's own training loop on this machine, before a GPU cluster is booked (docs/preflight.md).

Only what the machine cannot run is changed (the model, the engines, device counts, lengths and batch sizes by one
factor), each change in ``<target>/substitutions.md``; the keys that define the algorithm are never changed, and
one that cannot be honoured here fails the preflight unless ``--allow-unchecked KEY`` names it. Exit codes: 0 every
check of every target passed, 1 a check failed, 2 bad input (named before anything starts). Output under
``--out``: ``<target>/metrics.jsonl`` (``{"step": N, "data": {...}}`` a line), ``<target>/console.log``,
``<target>/checks.txt``, ``<target>/substitutions.md``, ``summary.json`` and ``summary.md``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from sat_ext.smoke.cli import versions
from sat_ext.smoke.runner import run_and_check

from .assets import Assets
from .substitution import markdown
from .verl_target import PreflightError

FRAMEWORKS = {"verl": "sat_ext.preflight.verl_run", "openrlhf": "sat_ext.preflight.openrlhf_run"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sat-ext preflight", description=__doc__.split("\n\n")[0])
    p.add_argument("framework", choices=tuple(FRAMEWORKS))
    p.add_argument(
        "target",
        help="verl: EXAMPLE/VARIANT (or EXAMPLE for all its variants), a Hydra config .yaml, or a composed config "
        ".yaml (--cfg job); openrlhf: EXAMPLE/VARIANT_lagL (e.g. openrlhf_aime_qwen3_30b/sat_gspo_lag8), or EXAMPLE; "
        "several, comma-separated, run one after the other",
    )
    p.add_argument("overrides", nargs="*", help="verl: Hydra overrides; openrlhf: extra flags after `--`")
    p.add_argument("--steps", type=int, default=None, help="global steps (default: enough to reach the lag's bound)")
    p.add_argument("--out", type=Path, default=None, help="an empty or new folder (default: a new temporary one)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: CUDA where available")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per target before it is killed")
    p.add_argument(
        "--allow-unchecked",
        action="append",
        default=[],
        metavar="KEY",
        help="run although KEY (an algorithm key this machine cannot honour, e.g. R3's) is not checked; repeatable",
    )
    p.add_argument("--scale", type=int, default=None, help="the factor lengths and batch sizes are divided by")
    p.add_argument(
        "--model", choices=("tiny", "keep"), default="tiny", help="keep: the config's own model (a GPU machine)"
    )
    return p


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _fresh(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PreflightError(f"--out {out} holds an earlier run (or is not a folder): give an empty or new folder")


def _allowed(args: argparse.Namespace, plans: list, names: list[str]) -> set[str]:
    """The keys ``--allow-unchecked`` names; raises naming an algorithm key left unchecked without it, or a name
    that no target needs."""
    allowed = {k.strip() for item in args.allow_unchecked for k in item.split(",") if k.strip()}
    needed = {u.key for p in plans for u in p.unchecked}
    for name, planned in zip(names, plans, strict=True):
        for u in planned.unchecked:
            if u.key not in allowed:
                raise PreflightError(
                    f"{name}: {u.key}={u.value!r} cannot be honoured here ({u.why}); run without checking it only "
                    f"with --allow-unchecked {u.key}"
                )
    if allowed - needed:
        raise PreflightError(f"--allow-unchecked {sorted(allowed - needed)}: no target has such an unchecked key")
    return allowed


def _run_target(framework: ModuleType, loaded, out: Path, assets: Assets, opts, timeout: float, allowed) -> dict:
    folder = out / loaded.name
    folder.mkdir(parents=True)
    prepared = framework.prepare(loaded, folder, assets, opts)
    planned = prepared.plan
    title = f"{framework.NAME} preflight of {loaded.name}"
    (folder / "substitutions.md").write_text(markdown(title, prepared.notes, planned.rows, planned.unchecked, allowed))
    print(f"[preflight] {loaded.name}: {planned.steps} steps on {opts.device}, factor {planned.factor} ...", flush=True)
    checked = run_and_check(
        f"[preflight] {loaded.name}",
        prepared.command,
        folder,
        timeout,
        framework.records,
        lambda logged: framework.run_checks(prepared, folder, logged),
    )
    return {
        **checked.entry(),
        "steps": planned.steps,
        "factor": planned.factor,
        "substitutions": len(planned.rows),
        "unchecked": [u.key for u in planned.unchecked],
    }


def summary_table(summary: dict) -> str:
    """``summary.md``: one row per target (steps, seconds, checks passed, keys not checked)."""
    lines = [
        f"# {summary['framework']} preflight ({summary['device']})",
        "",
        "| target | result | steps | factor | seconds | checks passed | not checked |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, t in summary["targets"].items():
        ok = sum(c["result"] != "FAIL" for c in t["checks"])
        lines.append(
            f"| {name} | {'PASS' if t['passed'] else 'FAIL'} | {t['steps']} | {t['factor']} | {t['seconds']:.0f} | "
            f"{ok}/{len(t['checks'])} | {', '.join(t['unchecked']) or '-'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    framework = importlib.import_module(FRAMEWORKS[args.framework])
    device = _device(args.device)
    try:
        if args.steps is not None and args.steps < 1:
            raise PreflightError(f"--steps must be >= 1, got {args.steps}")
        if args.model == "keep" and device == "cpu":
            raise PreflightError("--model keep needs a GPU machine: the config's own model cannot run on this CPU")
        out = (args.out or Path(tempfile.mkdtemp(prefix="sat_ext_preflight_"))).resolve()
        _fresh(out)
        opts = framework.Options(device, args.steps, args.scale, args.model == "keep")
        targets = [t for text in args.target.split(",") for t in framework.load(text, args.overrides)]
        plans = [framework.early_plan(t, opts) for t in targets]
        allowed = _allowed(args, plans, [t.name for t in targets])
    except PreflightError as err:
        print(f"sat-ext preflight: {err}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    summary = {
        "framework": args.framework,
        "target": args.target,
        "overrides": args.overrides,
        "device": device,
        "versions": versions(framework.DISTRIBUTIONS),
        "targets": {},
    }
    with tempfile.TemporaryDirectory(prefix="sat_ext_preflight_assets_") as scratch:
        assets = Assets(Path(scratch))
        for loaded in targets:
            summary["targets"][loaded.name] = _run_target(framework, loaded, out, assets, opts, args.timeout, allowed)
    summary["passed"] = all(t["passed"] for t in summary["targets"].values())
    summary["seconds"] = round(time.monotonic() - start, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(summary_table(summary))
    passed = sum(t["passed"] for t in summary["targets"].values())
    word = "passed" if summary["passed"] else "FAILED"
    print(f"[preflight] {word}: {passed}/{len(targets)} targets in {summary['seconds']:.0f} s; {out / 'summary.md'}")
    return 0 if summary["passed"] else 1
