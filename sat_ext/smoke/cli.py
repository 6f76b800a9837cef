"""``sat-ext smoke verl|openrlhf``: run a framework's own training loop with SAT and each lag mode for a few
steps, and check it.

On a machine without a GPU it runs on the CPU (verl: :mod:`sat_ext.verl.cpu`, FSDP2 on gloo, vLLM's CPU build
as verl's rollout server; OpenRLHF: :mod:`sat_ext.openrlhf.cpu`, DeepSpeed's CPU accelerator, vLLM's CPU
build); on a GPU machine the same command runs on the GPUs without the CPU setup: the preflight to run
before booking a cluster. Exit code 0 when every check of every variant passed, 1 otherwise, 2 for bad
arguments. Output, under ``--out``: ``<variant>/metrics.jsonl`` (one ``{"step": N, "data": {...}}`` line per
global step: verl's file logger; OpenRLHF's TensorBoard logger, converted), ``<variant>/console.log``,
``<variant>/checks.txt`` and ``summary.json``.

The frameworks' parts: :mod:`sat_ext.smoke.verl_variants`, :mod:`sat_ext.smoke.openrlhf_variants` (variants,
``prepare`` the command, read ``records``, ``variant_checks``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import tempfile
import time
from pathlib import Path
from types import ModuleType

from .assets import write_model
from .runner import run_and_check

FRAMEWORKS = {"verl": "sat_ext.smoke.verl_variants", "openrlhf": "sat_ext.smoke.openrlhf_variants"}
DEFAULT_STEPS = 4


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sat-ext smoke", description=__doc__.split("\n\n")[0])
    p.add_argument("framework", choices=tuple(FRAMEWORKS))
    p.add_argument(
        "--variants",
        default=None,
        help="comma-separated variant names (default: the framework's default set; docs/verl.md, "
        "docs/openrlhf.md; an unknown name lists them all)",
    )
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="global steps per variant (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: a new temporary folder)")
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto: the GPU where CUDA is available, else the CPU setup",
    )
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per variant before it is killed")
    return p


def _variants(framework: ModuleType, text: str | None, parser: argparse.ArgumentParser) -> list:
    names = list(framework.DEFAULT) if text is None else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in framework.VARIANTS]
    if unknown or not names:
        parser.error(f"--variants: unknown {unknown or names!r}; choose from {', '.join(framework.VARIANTS)}")
    return [framework.VARIANTS[n] for n in names]


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def versions(distributions: tuple[str, ...]) -> dict[str, str | None]:
    out = {}
    for dist in distributions:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def run_variant(
    framework: ModuleType, variant, model: Path, out: Path, steps: int, device: str, timeout_s: float, scratch: Path
) -> dict:
    """Run and check one variant; writes its folder under ``out`` and returns its summary entry."""
    folder = out / variant.name
    (folder / "inputs").mkdir(parents=True, exist_ok=True)
    cmd = framework.prepare(variant, folder, model, steps, device, scratch)
    print(f"[smoke] {variant.name}: running {framework.NAME} for {steps} global steps on {device} ...", flush=True)
    checked = run_and_check(
        f"[smoke] {variant.name}",
        cmd,
        folder,
        timeout_s,
        framework.records,
        lambda records: framework.variant_checks(variant, folder, records, steps),
    )
    return checked.entry()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    framework = importlib.import_module(FRAMEWORKS[args.framework])
    variants = _variants(framework, args.variants, parser)
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    device = _device(args.device)
    out = (args.out or Path(tempfile.mkdtemp(prefix="sat_ext_smoke_"))).resolve()  # each run's cwd is its folder
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    model = write_model(out / "model")
    summary = {
        "framework": args.framework,
        "device": device,
        "steps": args.steps,
        "versions": versions(framework.DISTRIBUTIONS),
        "variants": {},
    }
    with tempfile.TemporaryDirectory(prefix="sat_ext_smoke_scratch_") as scratch:
        for variant in variants:
            summary["variants"][variant.name] = run_variant(
                framework, variant, model, out, args.steps, device, args.timeout, Path(scratch)
            )
    summary["passed"] = all(v["passed"] for v in summary["variants"].values())
    summary["seconds"] = round(time.monotonic() - start, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    word = "passed" if summary["passed"] else "FAILED"
    print(
        f"[smoke] {word}: {sum(v['passed'] for v in summary['variants'].values())}/{len(variants)} variants "
        f"in {summary['seconds']:.0f} s; summary in {out / 'summary.json'}"
    )
    return 0 if summary["passed"] else 1
