"""What lag buys: every lag mode against synchronous training in verl's (or OpenRLHF's) own loop on the CPU.

    python benchmarks/bench_async.py --framework verl --steps 8 --out DIR [--modes sync,interval2,...] [--no-pin]
    python benchmarks/bench_async.py --framework verl --verl-client verl ...   # what verl's 1 s retry sleep costs

Every mode runs the smoke's setup (a tiny random Qwen3, 4 prompts x 4 samples per optimizer step, SAT, GRPO
advantages; :mod:`sat_ext.smoke.verl_variants`, :mod:`sat_ext.smoke.openrlhf_variants`) with the same settings and
longer responses (``--response-len``), so that generating a batch and training on it take comparable time. The
rollout engine and the trainer each get one core (``--no-pin`` leaves them to the scheduler): every process runs
one intra-op thread (``OMP_NUM_THREADS=1``, vLLM's OpenMP threads bound to core 0), and a thread of this script
pins, every second, the rollout's processes (vLLM, verl's agent loop and reward workers) to core 0 and the
trainer's (verl's FSDP workers and TaskRunner, OpenRLHF's DeepSpeed actors) to core 1 with
``sched_setaffinity`` on each of their threads; the run's other processes (Ray's own, verl's TransferQueue actors,
the rollout's HTTP server) go where the scheduler puts them, or with ``--pin-others`` to the trainer's core.

Per mode, at steady state (the global steps after the first lag window), from the framework's own step log:
seconds per optimizer step (median, min, max), the trainer's wait for samples, the rollout's wait for weights
(OpenRLHF: measured; verl, whose rollout reports no idle time: the step less G), the weight-sync time, the
kept-weights copy / restore time (verl, checkpoint denominator), tokens per second, for verl where the two cores
went (:mod:`_cpu_ledger`: each side's CPU and run-queue seconds per step, and the cores busy), the speedup over the
synchronous separate run, and the limit ratio: that speedup divided by the pipeline's limit
(G + T) / max(G, T), with G (generating one batch) and T (one optimizer step) measured in the synchronous
separate run of the same invocation. Output: ``DIR/bench_async.csv`` (long format: framework, mode, metric,
value), ``DIR/bench_async.md``, ``DIR/bench_async.png`` (optimizer steps per minute by mode) and each run's
folder (console log, metrics.jsonl).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from _common import command_line, env_lines, environment, md_table
from _cpu_ledger import CpuLedger

ROLLOUT_CORE, TRAINER_CORE = 0, 1
CORE_SIDES = {ROLLOUT_CORE: "rollout", TRAINER_CORE: "trainer"}
SIDES = (*CORE_SIDES.values(), "other")
#: process command-line fragments of each side (Ray names its actor processes ``ray::<Class>.<method>``)
ROLLOUT_NAMES = (
    "vllm",
    "VLLM",
    "EngineCore",
    "AgentLoopWorker",
    "RewardLoopWorker",
    "RolloutRayActor",
    "LLMRay",
    "GenerateSamplesActor",  # OpenRLHF's generator: drives vLLM and builds the samples (sat_ext's subclass too)
)
TRAINER_NAMES = ("WorkerDict", "TaskRunner", "PolicyModelActor", "ReferenceModelActor", "PPOTrainer", "TrainingActor")


@dataclass(frozen=True)
class Mode:
    """One run: its name, the smoke variant that builds it, optimizer steps per logged step, the warm-up steps."""

    name: str
    variant: object
    per_record: int
    warmup: int


def verl_modes():
    from sat_ext.smoke.verl_variants import Variant

    out = [Mode("sync", Variant("sync", "sat"), 1, 1)]
    out.append(
        Mode(
            "sync-separate",
            Variant("sync-separate", "sat", {"mode": "interval", "interval": 1, "prefetch": 0}, "checkpoint"),
            1,
            1,
        )
    )
    for n in (1, 2, 8):
        out.append(
            Mode(
                f"interval{n}",
                Variant(f"interval{n}", "sat", {"mode": "interval", "interval": n, "prefetch": 1}, "checkpoint"),
                n,
                1,
            )
        )
    for lag in (1, 4):
        for over in ("wait", "drop"):
            block = {"mode": "bounded", "max_lag": lag, "over_bound": over}
            out.append(Mode(f"bounded{lag}-{over}", Variant(f"bounded{lag}-{over}", "sat", block), 1, lag + 1))
    return {m.name: m for m in out}


def openrlhf_modes():
    from sat_ext.smoke.openrlhf_variants import Variant

    return {
        m.name: m
        for m in (
            Mode("sync", Variant("sync", "sat", patched_cli=False), 1, 1),
            Mode("interval2", Variant("interval2", "sat", {"mode": "interval", "interval": 2, "prefetch": 1}), 1, 2),
            Mode("bounded1", Variant("bounded1", "sat", {"mode": "bounded", "max_lag": 1, "over_bound": "wait"}), 1, 2),
        )
    }


# ------------------------------------------------------------------------------------------------ pinning


def core_of(process_text: str) -> int | None:
    """The core a process belongs on, from its command line and name: the rollout's first, then the trainer's;
    None for a process of neither side (Ray's own, this script)."""
    if any(n in process_text for n in ROLLOUT_NAMES):
        return ROLLOUT_CORE
    return TRAINER_CORE if any(n in process_text for n in TRAINER_NAMES) else None


PIN_SIDES, PIN_OTHERS, PIN_OFF = "sides", "sides+others", "off"


class Pinner(threading.Thread):
    """Pins, every ``period`` seconds, each thread of the rollout's processes to :data:`ROLLOUT_CORE` and the
    trainer's to :data:`TRAINER_CORE` (new processes and threads included), and with ``others`` every other
    process of this run (this script's descendants: Ray's own, the TransferQueue actors, ...) to the trainer's core
    too; counts the processes it pinned."""

    def __init__(self, others: bool, period: float = 1.0):
        super().__init__(daemon=True)
        self.others, self.period, self.stop, self.pinned = others, period, threading.Event(), {}

    def run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self.stop.wait(self.period):
            ours = {me.pid, *(c.pid for c in me.children(recursive=True))} if self.others else set()
            for proc in psutil.process_iter(["pid", "cmdline", "name"]):
                text = " ".join(proc.info["cmdline"] or []) + " " + (proc.info["name"] or "")
                core = core_of(text)
                if core is None and proc.info["pid"] in ours:
                    core = TRAINER_CORE
                if core is None:
                    continue
                try:
                    for thread in proc.threads():
                        os.sched_setaffinity(thread.id, {core})
                    self.pinned[proc.info["pid"]] = (core, text[:80])
                except (psutil.Error, OSError):
                    continue


# ------------------------------------------------------------------------------------------------ runs


def _run(framework: str, mode: Mode, out: Path, steps: int, response_len: int, pin: str, shape):
    """Run ``mode`` for ``steps`` logged steps plus its warm-up; returns its step records."""
    from sat_ext.smoke.assets import write_model
    from sat_ext.smoke.runner import run

    fw = _variants(framework)

    folder = out / mode.name
    (folder / "inputs").mkdir(parents=True, exist_ok=True)
    model = out / "model"
    if not (model / "config.json").exists():
        write_model(model, shape)
    total = steps + mode.warmup
    # a rerun into the same folder: verl's logger truncates metrics.jsonl only once its run is up, and the ledger,
    # which counts the file's lines from the start, would see the last run's steps and never open its window
    for stale in (folder / "metrics.jsonl", folder / LEDGER):
        stale.unlink(missing_ok=True)
    cmd = fw.prepare(mode.variant, folder, model, total, "cpu", out)
    argv = _longer(framework, list(cmd.argv), response_len)
    env = {**cmd.env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if pin != PIN_OFF:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(ROLLOUT_CORE)
    pinner = Pinner(others=pin == PIN_OTHERS) if pin != PIN_OFF else None
    if pinner:
        pinner.start()
    # verl's file logger writes one unbuffered line per logged step; OpenRLHF's loops have no such count
    ledger = (
        CpuLedger(lambda: _lines(folder / "metrics.jsonl"), mode.warmup, total, 0.5) if framework == "verl" else None
    )
    if ledger:
        ledger.start()
    print(f"[bench_async] {framework} {mode.name}: {total} steps ...", flush=True)
    result = run(argv, env, folder / "console.log", 3600, cwd=folder)
    if pinner:
        pinner.stop.set()
    if ledger:
        ledger.stop.set()
        ledger.join()
        wall, spent, cores = ledger.spent()
        if wall <= 0:
            print(f"[bench_async] {mode.name}: the CPU ledger's steady window had under two samples", flush=True)
        _write_ledger(folder / LEDGER, wall, spent, cores)
    records = _records(framework, folder)
    print(f"[bench_async] {framework} {mode.name}: exit {result.returncode} in {result.seconds:.0f} s", flush=True)
    return records, (pinner.pinned if pinner else {})


def _lines(path: Path) -> int:
    """Lines in ``path`` so far (0 before it exists)."""
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


#: each verl run's CPU ledger: wall seconds of the steady window and, per process label, CPU and run-queue seconds
LEDGER = "cpu_ledger.json"


def _write_ledger(path: Path, wall: float, spent, cores: dict[int, float]) -> None:
    import json

    labels = {k: {"cpu_s": v.cpu_s, "runq_s": v.wait_s, "side": _side(k)} for k, v in sorted(spent.items())}
    kept = {"window_s": wall, "core_busy": {str(c): b for c, b in sorted(cores.items())}, "labels": labels}
    path.write_text(json.dumps(kept, indent=1) + "\n")


def _side(label: str) -> str:
    """A process label's side: ``rollout`` or ``trainer`` (by :func:`core_of`), else ``other``."""
    return CORE_SIDES.get(core_of(label), "other")


def cpu_stats(folder: Path, sec_per_step: float) -> dict[str, float]:
    """Per optimizer step in the steady window (rates times the mode's mean seconds per step): each side's CPU
    seconds (``cpu_<side>_s``) and run-queue wait (``runq_<side>_s``); ``cores_busy``, the CPU seconds of all
    sides per wall second (at most 2 on this machine); and the busy share of each side's core
    (``core_busy_<side>``, every process on it). Empty when the run kept no ledger or its window was empty."""
    import json

    path = folder / LEDGER
    if not path.exists():
        return {}
    kept = json.loads(path.read_text())
    wall = kept["window_s"]
    if wall <= 0:
        return {}
    out = {f"{kind}_{side}_s": 0.0 for kind in ("cpu", "runq") for side in SIDES}
    for spent in kept["labels"].values():
        out[f"cpu_{spent['side']}_s"] += spent["cpu_s"] * sec_per_step / wall
        out[f"runq_{spent['side']}_s"] += spent["runq_s"] * sec_per_step / wall
    out["cores_busy"] = sum(s["cpu_s"] for s in kept["labels"].values()) / wall
    for core, side in CORE_SIDES.items():
        out[f"core_busy_{side}"] = kept.get("core_busy", {}).get(str(core), float("nan"))
    return out


def _variants(framework: str):
    """The smoke's variants module of ``framework`` (builds a run's command, reads its records back)."""
    from importlib import import_module

    return import_module(f"sat_ext.smoke.{framework}_variants")


def _records(framework: str, folder: Path):
    """A finished run's step records, read back from its folder."""
    return _variants(framework).records(folder)


def _kept(csv_path: Path, metric: str) -> dict[str, float]:
    """``metric`` per mode from an earlier bench_async.csv (for --report-only)."""
    import csv

    if not csv_path.exists():
        return {}
    rows = csv.DictReader(line for line in csv_path.read_text().splitlines() if not line.startswith("#"))
    return {r["mode"]: float(r["value"]) for r in rows if r["metric"] == metric}


def _longer(framework: str, argv: list[str], response_len: int) -> list[str]:
    """The smoke's command with responses of ``response_len`` tokens (and room for them)."""
    if framework == "verl":
        from sat_ext.smoke.verl_variants import PROMPT_LEN

        new = {
            "data.max_response_length": response_len,
            "actor_rollout_ref.rollout.max_model_len": PROMPT_LEN + response_len,
            "actor_rollout_ref.rollout.ignore_eos": "true",  # every response response_len tokens: a steady G
        }
        kept = [a for a in argv if a.split("=", 1)[0] not in new]
        return kept + [f"{k}={v}" for k, v in new.items()]
    from sat_ext.smoke.openrlhf_variants import MAX_LEN, RESPONSE_LEN

    out = list(argv)
    out[out.index("--rollout.max_new_tokens") + 1] = str(response_len)
    out[out.index("--data.max_len") + 1] = str(MAX_LEN - RESPONSE_LEN + response_len)
    return out


# ------------------------------------------------------------------------------------------------ stats


VERL_KEYS = {
    "step": "timing_s/step",
    "wait": "lag/consumer_idle_s",
    "sync": "timing_s/update_weights",
    "kept": "timing_s/lag_kept_weights",
    "drain": "timing_s/lag_drain",
    "tokens": "perf/total_num_tokens",
    "gen": "timing_s/gen",
}
OPENRLHF_KEYS = {
    "step": "timing/step_total",
    "wait": "lag/consumer_idle_s",
    "sync": "timing/broadcast",
    "producer": "lag/producer_idle_s",
    "gen": "timing/generation",
}


def stats(framework: str, mode: Mode, records) -> dict[str, float]:
    """The mode's steady-state figures per optimizer step (the module doc)."""
    keys = VERL_KEYS if framework == "verl" else OPENRLHF_KEYS
    steady = [r.values for r in records][mode.warmup :]
    if not steady:
        return {}

    def per_step(key: str) -> list[float]:
        return [v[key] / mode.per_record for v in steady if v.get(key) is not None]

    step = per_step(keys["step"])
    out = {
        "sec_per_step": statistics.median(step),
        "sec_per_step_mean": statistics.fmean(step),
        "sec_per_step_min": min(step),
        "sec_per_step_max": max(step),
        "steady_steps": float(len(step) * mode.per_record),
    }
    for name in ("wait", "sync", "kept", "gen", "producer", "drain"):
        values = per_step(keys[name]) if name in keys else []
        if values:
            out[f"{name}_s"] = statistics.median(values)
    if "tokens" in keys:
        tokens = [v[keys["tokens"]] / v[keys["step"]] for v in steady if v.get(keys["tokens"])]
        out["tokens_per_s"] = statistics.median(tokens) if tokens else float("nan")
    return out


def pipeline(results: dict[str, dict[str, float]], base: str) -> tuple[float, float, float]:
    """(G, T, limit) from the synchronous separate run: G its wait for each batch's generation, T the rest of its
    mean step less the weight sync, the limit (G + T) / max(G, T)."""
    b = results[base]
    gen = b.get("wait_s", b.get("gen_s", 0.0))
    train = b["sec_per_step_mean"] - gen - b.get("sync_s", 0.0)
    return gen, train, (gen + train) / max(gen, train)


_MATMUL = """
import os, sys, time, torch
os.sched_setaffinity(0, {int(sys.argv[1])})
torch.set_num_threads(1)
a, b = torch.randn(512, 512), torch.randn(512, 512)
for _ in range(20):
    a @ b
t, n = time.perf_counter(), 0
while time.perf_counter() - t < 5:
    a @ b
    n += 1
print(n / (time.perf_counter() - t))
"""


def core_contention() -> float:
    """The machine's bound on overlap: the rate of a one-thread 512 x 512 float32 matmul loop (working set past
    one core's L2) on core 0 while core 1 runs the same loop, over its rate alone. 1.0: the two cores do not slow
    each other; below 1, running the rollout and the trainer at once slows both."""
    import subprocess

    def rates(cores: list[int]) -> list[float]:
        procs = [subprocess.Popen([sys.executable, "-c", _MATMUL, str(c)], stdout=subprocess.PIPE) for c in cores]
        return [float(p.communicate()[0]) for p in procs]

    alone = rates([ROLLOUT_CORE])[0]
    both = rates([ROLLOUT_CORE, TRAINER_CORE])
    return statistics.fmean(both) / alone


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", choices=("verl", "openrlhf"), required=True)
    p.add_argument("--modes", default=None, help="comma-separated (default: every mode of the framework)")
    p.add_argument("--steps", type=int, default=8, help="logged steps at steady state, after each mode's warm-up")
    p.add_argument("--response-len", type=int, default=128, help="tokens per response (verl: EOS ignored)")
    p.add_argument("--hidden", type=int, default=64, help="the random Qwen3's hidden size (head_dim 32)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--no-pin",
        dest="pin",
        action="store_const",
        const=PIN_OFF,
        default=PIN_SIDES,
        help="do not pin the two sides to one core each",
    )
    p.add_argument(
        "--pin-others",
        dest="pin",
        action="store_const",
        const=PIN_OTHERS,
        help="also pin the run's other processes (Ray's, verl's TransferQueue actors, ...) to the trainer's "
        "core (default: where the scheduler puts them)",
    )
    p.add_argument("--report-only", action="store_true", help="re-read the runs already in --out; run nothing")
    p.add_argument(
        "--verl-client",
        choices=("sat", "verl"),
        default="sat",
        help="verl: the lag trainer's rollout client: sat_ext's (resubmits a request a weight sync aborted at once) or "
        "verl's own (sleeps 1 s first); a measurement of what that sleep costs (sat_ext.verl.lag.resubmit.CLIENT_ENV)",
    )
    args = p.parse_args(argv)
    # the runs' configs name the model folder in it; verl reads a relative path as a hub id
    args.out = args.out.resolve()
    if args.verl_client == "verl":
        if args.framework != "verl":
            p.error(f"--verl-client {args.verl_client}: with --framework verl only")
        from sat_ext.verl.lag.resubmit import CLIENT_ENV

        os.environ[CLIENT_ENV] = "verl"  # every run's process tree inherits it
    modes = verl_modes() if args.framework == "verl" else openrlhf_modes()
    names = args.modes.split(",") if args.modes else list(modes)
    unknown = [n for n in names if n not in modes]
    if unknown:
        p.error(f"--modes: unknown {unknown}; choose from {', '.join(modes)}")
    base = "sync-separate" if args.framework == "verl" else "sync"
    if base not in names:
        names.insert(0, base)
    from sat_ext.tiny_model import TinyShape

    shape = TinyShape(
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        layers=args.layers,
        heads=args.hidden // 32,
        kv_heads=1,
        max_positions=512,
    )
    env = environment(
        torch.device("cpu"),
        pinned=args.pin,
        response_len=str(args.response_len),
        model=str(shape),
        verl_client=args.verl_client if args.framework == "verl" else "-",
    )
    args.out.mkdir(parents=True, exist_ok=True)
    results, pins = {}, {}
    kept_pins = _kept(args.out / "bench_async.csv", "pinned_processes") if args.report_only else {}
    # measured with the runs: a report made later on a busy machine keeps the figure of the runs' machine
    contention = _kept(args.out / "bench_async.csv", "core_contention")["machine"] if args.report_only else None
    for name in names:
        if args.report_only:
            records, pinned = _records(args.framework, args.out / name), kept_pins.get(name, float("nan"))
        else:
            run = _run(args.framework, modes[name], args.out, args.steps, args.response_len, args.pin, shape)
            records, pinned = run[0], len(run[1])
        results[name], pins[name] = stats(args.framework, modes[name], records), pinned
        if results[name]:
            results[name].update(cpu_stats(args.out / name, results[name]["sec_per_step_mean"]))
    gen, train, limit = pipeline(results, base)
    rows = []
    for name, r in results.items():
        if not r:
            continue
        # each side's busy time per step against its time alone in the synchronous run (G, T): how much running
        # both at once slows each (core_contention says how much of that the machine's cores themselves explain)
        waited = r["wait_s"] if "wait_s" in r else r.get("gen_s", 0.0)  # a sync run generates inside its step
        r["trainer_busy_s"] = r["sec_per_step_mean"] - waited - r.get("sync_s", 0.0) - r.get("drain_s", 0.0)
        r["trainer_slowdown"] = r["trainer_busy_s"] / train
        if "producer_s" in r:
            r["rollout_slowdown"] = (r["sec_per_step_mean"] - r["producer_s"]) / gen
        # the rollout's wait for weights: measured by sat_ext's OpenRLHF actors; for verl, whose rollout reports
        # no idle time, derived as the mean step less one batch's generation time G (G from the synchronous run)
        r["rollout_wait_s"] = r.get("producer_s", max(0.0, r["sec_per_step_mean"] - gen))
        # throughput: steps per second over the steady state (a mode whose steps alternate long and short has a
        # median that is neither)
        r["speedup_vs_sync"] = results[base]["sec_per_step_mean"] / r["sec_per_step_mean"]
        r["limit_ratio"] = r["speedup_vs_sync"] / limit
        r["pinned_processes"] = float(pins[name])
        rows += [(args.framework, name, metric, value) for metric, value in r.items()]
    contention = core_contention() if contention is None else contention
    rows += [
        (args.framework, "machine", "core_contention", contention),
        (args.framework, base, "G_s", gen),
        (args.framework, base, "T_s", train),
        (args.framework, base, "limit", limit),
    ]
    _write(args, env, rows, results, (gen, train, limit, contention), argv)
    return 0


def _write(args, env, rows, results, pipe, argv) -> None:
    import csv

    gen, train, limit, contention = pipe
    with open(args.out / "bench_async.csv", "w", newline="") as f:
        for line in env_lines(env):
            f.write(f"# {line}\n")
        w = csv.writer(f)
        w.writerow(["framework", "mode", "metric", "value"])
        w.writerows((fw, mode, metric, f"{value:.6g}") for fw, mode, metric, value in rows)
    header = [
        "mode",
        "s / step (median)",
        "min-max",
        "mean",
        "speedup vs sync",
        "limit ratio",
        "trainer wait s",
        "rollout wait s",
        "sync s",
        "kept weights s",
        "trainer busy / T",
        "tokens / s",
    ]
    table = md_table(
        header,
        [
            (
                name,
                f"{r['sec_per_step']:.3f}",
                f"{r['sec_per_step_min']:.3f}-{r['sec_per_step_max']:.3f}",
                f"{r['sec_per_step_mean']:.3f}",
                f"{r['speedup_vs_sync']:.2f}",
                f"{r['limit_ratio']:.2f}",
                f"{r.get('wait_s', float('nan')):.3f}",
                f"{r['rollout_wait_s']:.3f}",
                f"{r.get('sync_s', float('nan')):.3f}",
                f"{r.get('kept_s', float('nan')):.3f}",
                f"{r['trainer_slowdown']:.2f}",
                f"{r.get('tokens_per_s', float('nan')):.0f}",
            )
            for name, r in results.items()
            if r
        ],
    )
    text = [
        f"# What lag buys: {args.framework}'s own loop on the CPU",
        "",
        f"`{command_line(__file__, argv)}`",
        "",
        "```",
        *env_lines(env),
        "```",
        "",
        f"Pipeline, from the synchronous separate run: G = {gen:.3f} s to generate a batch, T = {train:.3f} s per "
        f"optimizer step; limit (G + T) / max(G, T) = {limit:.2f}. Trainer wait: the trainer's time waiting for "
        "samples per optimizer step. Rollout wait: the rollout's time waiting for weights per optimizer step ("
        + ("measured by sat_ext's actors)." if args.framework == "openrlhf" else "derived: the step less G).")
        + " Seconds are medians over the steady-state steps; the speedup is the ratio of mean seconds per step"
        " (throughput). Trainer busy / T: the trainer's time per step that is neither waiting, weight sync nor"
        " drain, over T; above 1, running beside the rollout slowed it.",
        "",
        f"Core contention: a one-thread matmul loop on one core runs at {contention:.2f} of its rate alone while the"
        " other core runs the same loop (1.00: the two cores do not slow each other; below 1, shared caches or"
        " memory bandwidth slow both sides of any overlap by about that much).",
        "",
        table,
        "",
        *_cores_section(results),
    ]
    (args.out / "bench_async.md").write_text("\n".join(text))
    _plot(args.out / "bench_async.png", results, args.framework)


def _cores_section(results: dict[str, dict[str, float]]) -> list[str]:
    """The CPU ledger's table (verl runs only): where the two cores went per optimizer step."""
    rows = [(n, r) for n, r in results.items() if r and "cores_busy" in r]
    if not rows:
        return []
    base = dict(rows).get("sync-separate")
    base_cpu = sum(base[f"cpu_{s}_s"] for s in SIDES) if base else float("nan")
    header = [
        "mode",
        "s / step (mean)",
        "cores busy (of 2)",
        "rollout core busy",
        "trainer core busy",
        *(f"CPU s: {s}" for s in SIDES),
        "CPU s: all",
        "all / sync-separate",
        "run-queue s: rollout",
        "run-queue s: trainer",
    ]
    table = md_table(
        header,
        [
            (
                name,
                f"{r['sec_per_step_mean']:.3f}",
                f"{r['cores_busy']:.2f}",
                f"{r['core_busy_rollout']:.2f}",
                f"{r['core_busy_trainer']:.2f}",
                *(f"{r[f'cpu_{s}_s']:.3f}" for s in SIDES),
                f"{sum(r[f'cpu_{s}_s'] for s in SIDES):.3f}",
                f"{sum(r[f'cpu_{s}_s'] for s in SIDES) / base_cpu:.2f}",
                f"{r['runq_rollout_s']:.3f}",
                f"{r['runq_trainer_s']:.3f}",
            )
            for name, r in rows
        ],
    )
    return [
        "## Where the two cores went",
        "",
        "Per optimizer step over each run's steady window, from Linux's per-thread schedstat"
        f" (`benchmarks/_cpu_ledger.py`; each run's folder keeps `{LEDGER}`, per process): CPU seconds of the"
        " rollout's processes, the trainer's,"
        " and all others (Ray's, the driver's, this script's), and run-queue seconds, the time a side's threads were"
        " ready to run while their core ran something else (summed over threads: several can wait at once). Cores"
        " busy: CPU seconds of the run's processes per wall second; rollout / trainer core busy: the share of"
        " that core's time anything ran on it (/proc/stat). A side whose core is busy near 1 is bound by the work"
        " on that core, its own and the unpinned processes' that land there; below that, by waiting.",
        "",
        table,
        "",
    ]


def _plot(path: Path, results, framework: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, r in results.items() if r]
    per_min = [60.0 / results[n]["sec_per_step"] for n in names]
    fig, ax = plt.subplots(figsize=(max(5, len(names) * 0.9), 3.2))
    ax.bar(names, per_min, color=["#888" if n.startswith("sync") else "#2a6" for n in names])
    ax.set_ylabel("optimizer steps per minute")
    ax.set_title(f"{framework}: steps per minute by lag mode (CPU)")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
