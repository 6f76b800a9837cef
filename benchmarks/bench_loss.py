"""Time, peak memory and host-sync points of ``sat`` / ``sat_gspo`` against verl's ``vanilla`` / ``gspo``.

Every loss is called through verl's registry (``get_policy_loss_fn``) with a real verl ``ActorConfig`` (verl's
packaged Hydra config composed and converted with ``omega_conf_to_dataclass``, as verl's workers do), on the
same ragged micro-batch of N tokens (rows of at most 4096 tokens, at least 4 rows; each response's length
uniform in [T/4, T]), with the global batch info verl's engines attach (dp_size=1, batch_num_tokens,
global_batch_size). verl calls the loss once per micro-batch, and with dynamic batching (the paper's App. F:
32K tokens per GPU) a micro-batch holds about 2K-32K tokens: the sizes start there. SAT runs with gate scope
``micro`` and ``global``; the global scope runs inside an initialised 1-rank process group (gloo on CPU, nccl
on CUDA), so its collective path really runs.

Timing: forward+backward (``--modes fwd,fwd+bwd`` adds the forward alone); repetitions interleave every case
in a rotating order; the ratio is SAT's median over its peer's (vanilla for ``sat``, gspo for ``sat_gspo``)
from the same run, and the CPU-time ratio the same on the process CPU time (on shared cores the steadier
figure). Host-sync points per call: ``_common.host_syncs`` on one call (the counter
``tests/verl/test_verl_host_syncs.py`` uses).

Peak memory, on CPU: one fresh subprocess (after the timing) measures each (loss, size) with
  * ``alloc``: the peak of live bytes of torch's CPU allocator during the call, from the profiler's memory
    events (every c10 allocation and free), 0 = the live set (inputs) when the call starts;
  * ``rss``: the process RSS high-water during a forward+backward call (VmHWM re-armed through
    /proc/self/clear_refs) minus the RSS just before it, with glibc's mmap threshold fixed at 64 KiB
    (MALLOC_MMAP_THRESHOLD_) so that freed tensors go back to the OS and do not hide in the heap.
On CUDA: ``torch.cuda.max_memory_allocated`` minus ``memory_allocated`` before the call.

Results: ``<stem>.csv`` in long format (columns device, loss, peer, tokens, metric, value; the environment,
with the load average at the start and the end, in ``#`` lines), ``<stem>.md`` and ``<stem>.png``.

    python benchmarks/bench_loss.py                 # 2K .. 16M tokens (about 10 min on the 2-core CPU here)
    python benchmarks/bench_loss.py --quick         # 2K, 32K and 1M, a smoke run
    python benchmarks/bench_loss.py --sizes 1M,16M --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DEFAULT_SIZES = "2K,8K,32K,128K,1M,4M,16M"
QUICK_SIZES = "2K,32K,1M"
SMALL = 1 << 15  # up to this many tokens per call: verl's micro-batches under dynamic batching
TARGETS = {"small": 1.2, "large": 0.8}  # SAT / its peer, forward+backward time: up to 32K tokens, from 1M up
LARGE = 1 << 20
GSPO_RADII = (0.2, 0.2)  # the SAT paper's radii for GSPO and SAT-GSPO (Table 9)
MAX_ROW = 4096  # tokens per response


@dataclass(frozen=True)
class Case:
    loss: str  # verl registry name
    scope: str  # "-" for verl's losses, "micro" / "global" for SAT's
    agg: str

    @property
    def key(self) -> str:
        return self.loss if self.scope == "-" else f"{self.loss}[{self.scope}]"

    @property
    def peer(self) -> str | None:
        return {"sat": "vanilla", "sat_gspo": "gspo"}.get(self.loss)


CASES = (
    Case("vanilla", "-", "token-mean"),
    Case("sat", "micro", "token-mean"),
    Case("sat", "global", "token-mean"),
    Case("gspo", "-", "seq-mean-token-mean"),
    Case("sat_gspo", "micro", "seq-mean-token-mean"),
    Case("sat_gspo", "global", "seq-mean-token-mean"),
)


# --------------------------------------------------------------------------------------------------- verl


def actor_config(case: Case, c_min: float | None = None):
    """verl's packaged trainer config composed with Hydra and converted to the worker's ActorConfig."""
    import verl
    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    pl, actor = "actor_rollout_ref.actor.policy_loss.", "actor_rollout_ref.actor."
    ov = [f"{actor}ppo_micro_batch_size_per_gpu=2", f"{pl}loss_mode={case.loss}"]
    if case.loss in ("sat", "sat_gspo"):
        ov += [f"{pl}_target_=sat_ext.verl.config.SATPolicyLossConfig", f"+{pl}sat_gate_scope={case.scope}"]
        if c_min is not None:
            ov.append(f"+{pl}sat_c_min={c_min}")
    if case.loss in ("gspo", "sat_gspo"):
        ov += [f"{actor}clip_ratio_low={GSPO_RADII[0]}", f"{actor}clip_ratio_high={GSPO_RADII[1]}"]
    ov.append(f"{actor}loss_agg_mode={case.agg}")
    cfg_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=ov)
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def init_one_rank_group(device: torch.device) -> str:
    if dist.is_initialized():
        return dist.get_backend()
    backend = "nccl" if device.type == "cuda" else "gloo"
    fd, path = tempfile.mkstemp(prefix="sat_bench_pg_")
    os.close(fd)
    os.unlink(path)
    dist.init_process_group(backend, init_method=f"file://{path}", rank=0, world_size=1)
    return backend


# --------------------------------------------------------------------------------------------------- inputs


def row_length(n_tokens: int) -> int:
    """The benchmark's response length for n tokens: rows of MAX_ROW tokens, at least 4 rows."""
    return max(1, min(MAX_ROW, n_tokens // 4))


def make_inputs(n_tokens: int, seq_len: int, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    """A rollout-like micro-batch: right-padded responses (lengths uniform in [seq_len/4, seq_len], about 62%
    active), token log-ratios ~ N(0, 0.1^2), GRPO-style per-sequence advantages."""
    b = max(1, n_tokens // seq_len)
    g = torch.Generator().manual_seed(seed)
    old = -(torch.rand(b, seq_len, generator=g) * 3.0 + 0.05)
    lp = old + 0.1 * torch.randn(b, seq_len, generator=g)
    lens = torch.randint(seq_len // 4, seq_len + 1, (b, 1), generator=g)
    mask = torch.arange(seq_len).unsqueeze(0) < lens
    adv = torch.randn(b, 1, generator=g).expand(b, seq_len) * mask
    out = {"old": old, "lp": lp, "adv": adv.contiguous(), "mask": mask}
    return {k: v.to(device) for k, v in out.items()}


def global_batch_info(x: dict[str, torch.Tensor]) -> dict:
    """What verl's engines attach to each micro-batch (workers/utils/losses.py: dp_size, batch_num_tokens...)."""
    return {
        "dp_size": 1,
        "batch_num_tokens": int(x["mask"].sum()),
        "global_batch_size": x["mask"].shape[0],
        "loss_scale_factor": None,
    }


class Runner:
    def __init__(self, cases, device: torch.device):
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        self.device = device
        self.cfgs = {c: actor_config(c) for c in cases}
        self.fns = {c: get_policy_loss_fn(c.loss) for c in cases}

    def set_inputs(self, x: dict[str, torch.Tensor]) -> None:
        self.x = x
        gbi = global_batch_info(x)
        for cfg in self.cfgs.values():
            cfg.global_batch_info.clear()
            cfg.global_batch_info.update(gbi)

    def call(self, case: Case, backward: bool, marker: str | None = None):
        """One loss call on fresh leaf log-probs; the leaf is made before the caller starts its clock."""
        from torch.profiler import record_function

        x = self.x
        lp = x["lp"].detach().clone().requires_grad_(True)

        def run():
            with record_function(marker) if marker is not None else nullcontext():
                loss, _ = self.fns[case](
                    old_log_prob=x["old"],
                    log_prob=lp,
                    advantages=x["adv"],
                    response_mask=x["mask"],
                    loss_agg_mode=case.agg,
                    config=self.cfgs[case],
                )
            if backward:
                loss.backward()
            return loss

        return run


# --------------------------------------------------------------------------------------------------- checks


def equality_check(device: torch.device, n_tokens: int = 1 << 16, seq_len: int = 4096) -> bool:
    """SAT at c_min = 1 is verl's vanilla / gspo bit for bit (loss and gradient) on the benchmark tensors."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    x = make_inputs(n_tokens, seq_len, device, seed=1)
    gbi = global_batch_info(x)
    ok = True
    for sat, ref in (
        (Case("sat", "micro", "token-mean"), Case("vanilla", "-", "token-mean")),
        (Case("sat", "global", "token-mean"), Case("vanilla", "-", "token-mean")),
        (Case("sat_gspo", "micro", "seq-mean-token-mean"), Case("gspo", "-", "seq-mean-token-mean")),
        (Case("sat_gspo", "global", "seq-mean-token-mean"), Case("gspo", "-", "seq-mean-token-mean")),
    ):
        outs = []
        for case, cfg in ((sat, actor_config(sat, c_min=1.0)), (ref, actor_config(ref))):
            cfg.global_batch_info.update(gbi)
            lp = x["lp"].clone().requires_grad_(True)
            loss, m = get_policy_loss_fn(case.loss)(
                old_log_prob=x["old"],
                log_prob=lp,
                advantages=x["adv"],
                response_mask=x["mask"],
                loss_agg_mode=case.agg,
                config=cfg,
            )
            loss.backward()
            outs.append((loss.detach(), lp.grad, m))
        same = torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
        same = same and all(outs[0][2][k] == outs[1][2][k] for k in ("actor/pg_clipfrac", "actor/ppo_kl"))
        ok = ok and same
    return ok


# --------------------------------------------------------------------------------------------------- timing


def time_size(runner: Runner, reps: int, device: torch.device, modes=("fwd+bwd",)) -> dict:
    """{(case key, mode): (wall seconds, CPU seconds) per repetition}, every case interleaved."""
    cases = list(runner.cfgs)
    samples = {(c.key, m): ([], []) for c in cases for m in modes}
    for rep in range(reps):
        order = cases[rep % len(cases) :] + cases[: rep % len(cases)]
        for c in order:
            for mode in modes:
                wall, cpu_s = C.timed2(runner.call(c, mode == "fwd+bwd"), device)
                samples[(c.key, mode)][0].append(wall)
                samples[(c.key, mode)][1].append(cpu_s)
    return samples


def sync_counts(runner: Runner) -> dict[str, dict[str, int]]:
    """Host-sync points of one forward+backward call per case (after the timing: nothing left to warm up)."""
    return {c.key: C.host_syncs(runner.call(c, True)) for c in runner.cfgs}


# --------------------------------------------------------------------------------------------------- memory


def memory_rows_cpu(runner: Runner, n: int, with_rss: bool) -> list[dict]:
    rows = []
    for c in runner.cfgs:
        peak, fwd_peak = C.torch_alloc_peak_bytes(
            runner.call(c, True, marker="sat_bench::forward"), marker="sat_bench::forward"
        )
        row = {
            "tokens": n,
            "case": c.key,
            "alloc_peak_fwd_mib": fwd_peak / 2**20,
            "alloc_peak_fwdbwd_mib": peak / 2**20,
        }
        if with_rss:
            row["rss_peak_fwdbwd_mib"] = C.rss_peak_bytes(runner.call(c, True)) / 2**20
        rows.append(row)
    return rows


def memory_rows_cuda(runner: Runner, n: int) -> list[dict]:
    rows = []
    for c in runner.cfgs:
        row = {"tokens": n, "case": c.key}
        for mode, key in ((False, "alloc_peak_fwd_mib"), (True, "alloc_peak_fwdbwd_mib")):
            fn = runner.call(c, mode)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            fn()
            torch.cuda.synchronize()
            row[key] = (torch.cuda.max_memory_allocated() - base) / 2**20
        rows.append(row)
    return rows


def selected_cases(spec: str | None) -> list[Case]:
    """The cases ``--cases`` names (comma list of keys such as ``vanilla,sat[micro]``; None: all of them)."""
    if spec is None:
        return list(CASES)
    keys = spec.split(",")
    unknown = [k for k in keys if k not in {c.key for c in CASES}]
    if unknown:
        raise SystemExit(f"--cases: unknown case {unknown} (one of {[c.key for c in CASES]})")
    return [c for c in CASES if c.key in keys]


def mem_worker(args) -> None:
    """Fresh-process memory measurement for every size; one JSON line per (size, case) on stdout."""
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    init_one_rank_group(device)
    runner = Runner(selected_cases(args.cases), device)
    with_rss = C.rss_probe_available() and not args.no_rss
    runner.set_inputs(make_inputs(1 << 16, MAX_ROW, device))
    for c in runner.cfgs:  # one warm call per case (lazy allocations of a first call), at a small size
        runner.call(c, True)()
    for n in [C.parse_size(s) for s in args.sizes.split(",")]:
        runner.set_inputs(make_inputs(n, row_length(n), device))
        for c in runner.cfgs:  # warm at this size
            runner.call(c, True)()
        for row in memory_rows_cpu(runner, n, with_rss):
            print("MEMROW " + json.dumps(row), flush=True)
        runner.x = None


def run_mem_subprocess(args, sizes: list[int]) -> list[dict]:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_ARENA_MAX="2")
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--mem-worker",
        "--sizes",
        ",".join(C.fmt_size(s) for s in sizes),
        "--threads",
        str(args.threads),
    ]
    if args.no_rss:
        cmd.append("--no-rss")
    if args.cases:
        cmd += ["--cases", args.cases]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"memory worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("MEMROW ")]


# --------------------------------------------------------------------------------------------------- results


def long_rows(device: str, n: int, samples: dict, syncs: dict, reps: int) -> list[dict]:
    """One row per (case, metric) of one size: the case's own figures, and for SAT's cases the ratios to the
    peer measured in the same run (columns device, loss, peer, tokens, metric, value)."""
    rows = []
    med = {k: (C.median(w), C.median(c)) for k, (w, c) in samples.items()}
    for (key, mode), (wall, cpu) in samples.items():
        case = next(c for c in CASES if c.key == key)
        peer, sfx = case.peer or "", "" if mode == "fwd+bwd" else "_fwd"

        def add(metric: str, value) -> None:
            rows.append({"device": device, "loss": key, "peer": peer, "tokens": n, "metric": metric, "value": value})

        add(f"time_ms{sfx}", med[(key, mode)][0] * 1e3)
        add(f"time_ms_p10{sfx}", sorted(wall)[len(wall) // 10] * 1e3)
        add(f"cpu_ms{sfx}", med[(key, mode)][1] * 1e3)
        add(f"reps{sfx}", reps)
        if mode == "fwd+bwd":
            add("host_syncs", sum(syncs[key].values()))
            add("host_sync_ops", " ".join(f"{k}:{v}" for k, v in sorted(syncs[key].items())) or "-")
        if peer:
            p_wall, p_cpu = samples[(peer, mode)]
            add(f"time_ratio{sfx}", med[(key, mode)][0] / med[(peer, mode)][0])
            add(f"time_ratio_paired{sfx}", C.median([a / b for a, b in zip(wall, p_wall)]))
            add(f"cpu_time_ratio{sfx}", med[(key, mode)][1] / med[(peer, mode)][1])
            if mode == "fwd+bwd":
                add("host_syncs_peer", sum(syncs[peer].values()))
    return rows


def memory_long_rows(device: str, mem_rows: list[dict]) -> list[dict]:
    by = {(r["tokens"], r["case"]): r for r in mem_rows}
    rows = []
    for r in mem_rows:
        case = next(c for c in CASES if c.key == r["case"])
        for k, metric in (
            ("alloc_peak_fwdbwd_mib", "peak_alloc_mib"),
            ("alloc_peak_fwd_mib", "peak_alloc_mib_fwd"),
            ("rss_peak_fwdbwd_mib", "peak_rss_mib"),
        ):
            if k not in r:
                continue
            base = {"device": device, "loss": r["case"], "peer": case.peer or "", "tokens": r["tokens"]}
            rows.append({**base, "metric": metric, "value": r[k]})
            p = by.get((r["tokens"], case.peer)) if case.peer else None
            if p is not None and p.get(k, 0) > 0:
                rows.append({**base, "metric": metric.replace("_mib", "_ratio"), "value": r[k] / p[k]})
    return rows


def _verdict(ratio: float, target: float) -> str:
    return "yes" if ratio <= target else f"NO (+{100 * (ratio / target - 1):.0f}%)"


def _table_rows(get: dict, sizes: list[int], keys: list[str], needs: str, cells) -> list[list]:
    """One table row per (size, case) that has the metric ``needs``: size, case, then ``cells(size, metric)``."""
    out = []
    for n in sizes:
        for k in keys:
            metric = lambda m, k=k, n=n: get.get((k, n, m))  # noqa: E731
            if metric(needs) is not None:
                out.append([C.fmt_size(n), k, *cells(n, metric)])
    return out


def render(rows: list[dict], env: dict, out_dir: Path, stem: str) -> None:
    get = {(r["loss"], r["tokens"], r["metric"]): r["value"] for r in rows}
    sizes = sorted({r["tokens"] for r in rows})
    keys = [c.key for c in CASES if any(r["loss"] == c.key for r in rows)]
    f = lambda v, d=2: "" if v is None else f"{float(v):.{d}f}"  # noqa: E731

    def headline(n, g):
        target = TARGETS["small"] if n <= SMALL else TARGETS["large"] if n >= LARGE else None
        return [
            f(g("time_ratio"), 3),
            f(g("cpu_time_ratio"), 3),
            f(g("time_ratio_paired"), 3),
            f(g("peak_alloc_ratio"), 3),
            f(g("peak_rss_ratio"), 3),
            f"{g('host_syncs')} / {g('host_syncs_peer')}",
            "-" if target is None else f"<= {target}: {_verdict(float(g('time_ratio')), target)}",
        ]

    head = [
        "tokens",
        "case",
        "time ratio",
        "CPU-time ratio",
        "paired",
        "peak-alloc ratio",
        "RSS ratio",
        "host syncs / call (SAT / peer)",
        "time target",
    ]
    hl = _table_rows(get, sizes, keys, "time_ratio", headline)
    all_head = [
        "tokens",
        "case",
        "fwd+bwd ms (median)",
        "p10 ms",
        "CPU ms",
        "reps",
        "peak alloc MiB",
        "RSS MiB",
        "host syncs",
        "sync ops",
    ]
    body = _table_rows(
        get,
        sizes,
        keys,
        "time_ms",
        lambda n, g: [
            f(g("time_ms"), 3),
            f(g("time_ms_p10"), 3),
            f(g("cpu_ms"), 3),
            g("reps"),
            f(g("peak_alloc_mib"), 2),
            f(g("peak_rss_mib"), 2),
            g("host_syncs"),
            g("host_sync_ops"),
        ],
    )
    note = (
        "Ratios: SAT's median over its peer's median in the same run (peer: `vanilla` for `sat`, `gspo` for "
        "`sat_gspo`); `CPU-time` is the same on the process CPU time (time preempted by other jobs on the shared "
        "cores is not counted); `paired` is the median of the per-repetition ratios. Peak memory is above the live "
        "inputs: torch's CPU allocator peak from the profiler's memory events (CUDA: max_memory_allocated) and the "
        "RSS growth of a fresh process. Host syncs: values read back to the host or data-dependent output shapes, "
        f"per call (`_common.host_syncs`). Time targets: <= {TARGETS['small']}x up to 32K tokens, "
        f"<= {TARGETS['large']}x from 1M up."
    )
    C.write_md(
        out_dir / f"{stem}.md",
        "bench_loss: SAT vs verl's vanilla / gspo",
        env,
        [
            ("Headline (forward+backward)", C.md_table(head, hl) + "\n\n" + note),
            ("All measurements", C.md_table(all_head, body)),
        ],
    )
    plot(rows, out_dir / f"{stem}.png", env)


def plot(rows: list[dict], path: Path, env: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    get = {(r["loss"], r["tokens"], r["metric"]): r["value"] for r in rows}
    sizes = sorted({r["tokens"] for r in rows})
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for c in CASES:
        xs = [n for n in sizes if (c.key, n, "time_ms") in get]
        if not xs:
            continue
        axes[0].loglog(xs, [float(get[(c.key, n, "time_ms")]) for n in xs], marker="o", label=c.key)
        for ax, m in ((axes[1], "time_ratio"), (axes[2], "peak_alloc_ratio")):
            ys = [(n, get.get((c.key, n, m))) for n in xs]
            ys = [(n, float(y)) for n, y in ys if y is not None]
            if ys:
                ax.semilogx([n for n, _ in ys], [y for _, y in ys], marker="o", label=c.key)
    axes[0].set(title="forward+backward time (median)", xlabel="tokens per call", ylabel="ms")
    axes[1].axhline(TARGETS["small"], color="k", ls=":", lw=1, label=f"target {TARGETS['small']}x (<= 32K)")
    axes[1].axhline(TARGETS["large"], color="k", ls="--", lw=1, label=f"target {TARGETS['large']}x (>= 1M)")
    axes[1].set(title="time / peer (vanilla or gspo)", xlabel="tokens per call", ylabel="ratio")
    axes[2].set(title="peak memory / peer (fwd+bwd)", xlabel="tokens per call", ylabel="ratio")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{env['device']} | torch {env['torch']} | threads {env['torch_threads']} | {env['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------- main


def default_reps(n: int) -> int:
    return 201 if n <= SMALL else 41 if n <= 1 << 17 else 9 if n <= 1 << 20 else 5 if n <= 1 << 22 else 3


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=None, help=f"comma list of token counts (default {DEFAULT_SIZES})")
    ap.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, fewer repetitions")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per size (default: 201 up to 32K ... 3 at 16M)")
    ap.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("SAT_BENCH_THREADS", "1")),
        help="torch CPU threads (default 1: the cores here are shared, 1 thread is the stable figure)",
    )
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-rss", action="store_true", help="CPU: only the allocator peak, not the RSS cross-check")
    ap.add_argument("--modes", default="fwd+bwd", help="timed modes (comma list of fwd, fwd+bwd)")
    ap.add_argument("--cases", default=None, help="comma list of case keys (default all), e.g. vanilla,sat[micro]")
    ap.add_argument("--out", default=str(C.RESULTS))
    ap.add_argument("--stem", default=None, help="result file stem (default bench_loss_<device>)")
    ap.add_argument("--mem-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mem_worker:
        return mem_worker(args)

    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else "cpu"
        if args.device == "auto"
        else args.device
    )
    if device.type == "cuda":
        torch.cuda.set_device(0)
    torch.set_num_threads(args.threads)
    sizes = [C.parse_size(s) for s in (args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES)).split(",")]
    cases = selected_cases(args.cases)
    backend = init_one_rank_group(device)
    env = C.environment(device, collective_backend=f"{backend} (1 rank)", max_tokens_per_row=MAX_ROW)
    runner = Runner(cases, device)
    equal = equality_check(device)
    print(f"device={C.device_description(device)} backend={backend} c_min=1 bit-for-bit vs verl: {equal}", flush=True)

    runner.set_inputs(make_inputs(1 << 16, MAX_ROW, device))  # warm every case once
    for c in cases:
        runner.call(c, True)()
    rows, mem_rows = [], []
    modes = tuple(m for m in ("fwd", "fwd+bwd") if m in args.modes.split(","))
    for n in sizes:
        t0 = time.perf_counter()
        reps = args.reps or (max(3, default_reps(n) // 4) if args.quick else default_reps(n))
        runner.set_inputs(make_inputs(n, row_length(n), device))
        for c in cases:  # warm at this size
            runner.call(c, True)()
        samples = time_size(runner, reps, device, modes)
        size_rows = long_rows(device.type, n, samples, sync_counts(runner), reps)
        rows += size_rows
        by = {(r["loss"], r["metric"]): r["value"] for r in size_rows}
        for c in cases:
            ratio = by.get((c.key, "time_ratio"))
            print(
                f"{C.fmt_size(n):>5} {c.key:18s} fwd+bwd {by[(c.key, 'time_ms')]:10.3f} ms"
                f"  syncs {by[(c.key, 'host_syncs')]}"
                + (f"  x{ratio:.3f} vs peer (CPU x{by[(c.key, 'cpu_time_ratio')]:.3f})" if ratio else ""),
                flush=True,
            )
        print(f"{C.fmt_size(n):>5} {reps} reps in {time.perf_counter() - t0:.1f} s, load {_load()}", flush=True)
        if device.type == "cuda" and not args.no_memory:
            mem_rows += memory_rows_cuda(runner, n)
        runner.x = None
    if device.type == "cpu" and not args.no_memory:
        mem_rows = run_mem_subprocess(args, sizes)
    rows += memory_long_rows(device.type, mem_rows)
    env.update(
        sat_c_min_1_bit_for_bit_vs_verl=str(equal),
        finished=C.environment(device)["date"],
        load_avg_at_end=_load(),
        memory_method=(
            "torch.cuda.max_memory_allocated"
            if device.type == "cuda"
            else "profiler memory events (torch CPU allocator) + RSS VmHWM delta, fresh process"
        ),
    )
    out = Path(args.out)
    stem = args.stem or f"bench_loss_{device.type}"
    C.write_csv(out / f"{stem}.csv", rows, env)
    render(rows, env, out, stem)
    print(f"wrote {out / stem}.csv/.md/.png")


if __name__ == "__main__":
    main()
