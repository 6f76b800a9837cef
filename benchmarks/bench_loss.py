"""Time and peak memory of ``sat`` / ``sat_gspo`` against verl's ``vanilla`` / ``gspo``, side by side.

Every loss is called through verl's registry (``get_policy_loss_fn``) with a real verl ``ActorConfig`` (verl's
packaged Hydra config composed and converted with ``omega_conf_to_dataclass``, as verl's workers do), on the
same tensors of shape (N / seq_len, seq_len), with the global batch info verl's engines attach (dp_size=1,
batch_num_tokens, global_batch_size). SAT runs with gate scope ``micro`` and ``global``; the global scope runs
inside an initialised 1-rank process group (gloo on CPU, nccl on CUDA), so its collective path really runs
(the collective's own cost is measured in ``bench_quantile.py``).

Timing: repetitions interleave every (loss, scope) in a rotating order, forward and forward+backward; the
tables report medians and the ratio of the SAT median to its peer's (vanilla for ``sat``, gspo for
``sat_gspo``) from the same run.

Peak memory, on CPU: one fresh subprocess (after the timing) measures each (loss, size) with
  * ``alloc``: the peak of live bytes of torch's CPU allocator during the call, from the profiler's memory
    events (every c10 allocation and free), 0 = the live set (inputs) when the call starts; the forward
    peak is the same trace cut at the end of the forward pass;
  * ``rss``: the process RSS high-water during a forward+backward call (VmHWM re-armed through
    /proc/self/clear_refs) minus the RSS just before it, with glibc's mmap threshold fixed at 64 KiB
    (MALLOC_MMAP_THRESHOLD_) so that freed tensors go back to the OS and do not hide in the heap.
On CUDA: ``torch.cuda.max_memory_allocated`` minus ``memory_allocated`` before the call.

    python benchmarks/bench_loss.py                 # default sizes 64K..64M (about 10 min on 2 CPU cores)
    python benchmarks/bench_loss.py --quick         # 64K and 1M, a smoke run
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
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DEFAULT_SIZES = "64K,256K,1M,4M,16M,64M"
QUICK_SIZES = "64K,1M"
TARGETS = (0.8, 0.8)  # SAT / its peer: forward+backward time (wall and CPU), peak memory (allocator and RSS)
GSPO_RADII = (0.2, 0.2)  # the SAT paper's radii for GSPO and SAT-GSPO (Table 9)


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
    return {"dp_size": 1, "batch_num_tokens": int(x["mask"].sum()), "global_batch_size": x["mask"].shape[0],
            "loss_scale_factor": None}


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
            if marker is not None:
                with record_function(marker):
                    loss, _ = self.fns[case](old_log_prob=x["old"], log_prob=lp, advantages=x["adv"],
                                             response_mask=x["mask"], loss_agg_mode=case.agg, config=self.cfgs[case])
            else:
                loss, _ = self.fns[case](old_log_prob=x["old"], log_prob=lp, advantages=x["adv"],
                                         response_mask=x["mask"], loss_agg_mode=case.agg, config=self.cfgs[case])
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
    for sat, ref in ((Case("sat", "micro", "token-mean"), Case("vanilla", "-", "token-mean")),
                     (Case("sat", "global", "token-mean"), Case("vanilla", "-", "token-mean")),
                     (Case("sat_gspo", "micro", "seq-mean-token-mean"), Case("gspo", "-", "seq-mean-token-mean")),
                     (Case("sat_gspo", "global", "seq-mean-token-mean"), Case("gspo", "-", "seq-mean-token-mean"))):
        outs = []
        for case, cfg in ((sat, actor_config(sat, c_min=1.0)), (ref, actor_config(ref))):
            cfg.global_batch_info.update(gbi)
            lp = x["lp"].clone().requires_grad_(True)
            loss, m = get_policy_loss_fn(case.loss)(old_log_prob=x["old"], log_prob=lp, advantages=x["adv"],
                                                    response_mask=x["mask"], loss_agg_mode=case.agg, config=cfg)
            loss.backward()
            outs.append((loss.detach(), lp.grad, m))
        same = torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
        same = same and all(outs[0][2][k] == outs[1][2][k] for k in ("actor/pg_clipfrac", "actor/ppo_kl"))
        ok = ok and same
    return ok


# --------------------------------------------------------------------------------------------------- timing


def time_size(runner: Runner, n: int, reps: int, device: torch.device, modes=("fwd", "fwd+bwd")) -> list[dict]:
    cases = list(runner.cfgs)
    samples = {(c, m): [] for c in cases for m in modes}
    cpu = {(c, m): [] for c in cases for m in modes}
    for rep in range(reps):
        order = cases[rep % len(cases):] + cases[: rep % len(cases)]
        for c in order:
            for mode in modes:
                wall, cpu_s = C.timed2(runner.call(c, mode == "fwd+bwd"), device)
                samples[(c, mode)].append(wall)
                cpu[(c, mode)].append(cpu_s)
    rows = []
    for (c, mode), ts in samples.items():
        rows.append({"tokens": n, "loss": c.loss, "scope": c.scope, "case": c.key, "mode": mode, "reps": reps,
                     "time_ms_median": C.median(ts) * 1e3, "time_ms_min": min(ts) * 1e3,
                     "cpu_ms_median": C.median(cpu[(c, mode)]) * 1e3,
                     "time_ms_all": " ".join(f"{t * 1e3:.2f}" for t in ts)})
    # paired per-repetition ratios against the peer (same repetition, adjacent in time)
    by = {(r["case"], r["mode"]): r for r in rows}
    for r in rows:
        peer = Case(r["loss"], r["scope"], "").peer
        if peer:
            p = samples[(next(c for c in cases if c.key == peer), r["mode"])]
            s = samples[(next(c for c in cases if c.key == r["case"]), r["mode"])]
            r["time_ratio_vs_peer"] = r["time_ms_median"] / by[(peer, r["mode"])]["time_ms_median"]
            r["time_ratio_paired_median"] = C.median([a / b for a, b in zip(s, p)])
            r["cpu_ratio_vs_peer"] = r["cpu_ms_median"] / by[(peer, r["mode"])]["cpu_ms_median"]
    return rows


# --------------------------------------------------------------------------------------------------- memory


def memory_rows_cpu(runner: Runner, n: int, with_rss: bool) -> list[dict]:
    rows = []
    for c in runner.cfgs:
        peak, fwd_peak = C.torch_alloc_peak_bytes(runner.call(c, True, marker="sat_bench::forward"),
                                                   marker="sat_bench::forward")
        row = {"tokens": n, "case": c.key, "alloc_peak_fwd_mib": fwd_peak / 2**20,
               "alloc_peak_fwdbwd_mib": peak / 2**20}
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


def mem_worker(args) -> None:
    """Fresh-process memory measurement for every size; one JSON line per (size, case) on stdout."""
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    init_one_rank_group(device)
    runner = Runner([c for c in CASES if args.cases is None or c.key in args.cases.split(",")], device)
    with_rss = C.rss_probe_available() and not args.no_rss
    runner.set_inputs(make_inputs(1 << 16, args.seq_len, device))
    for c in runner.cfgs:  # one warm call per case (lazy allocations of a first call), at a small size
        runner.call(c, True)()
    for n in [C.parse_size(s) for s in args.sizes.split(",")]:
        t0 = time.perf_counter()
        runner.set_inputs(make_inputs(n, args.seq_len, device))
        rows = memory_rows_cpu(runner, n, with_rss)
        for row in rows:
            row["memory_phase_s"] = time.perf_counter() - t0
            print("MEMROW " + json.dumps(row), flush=True)
        runner.x = None


def run_mem_subprocess(args, sizes: list[int]) -> list[dict]:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_ARENA_MAX="2")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--mem-worker", "--sizes",
           ",".join(C.fmt_size(s) for s in sizes), "--threads", str(args.threads), "--seq-len", str(args.seq_len)]
    if args.no_rss:
        cmd.append("--no-rss")
    if args.cases:
        cmd += ["--cases", args.cases]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"memory worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("MEMROW ")]


# --------------------------------------------------------------------------------------------------- report


def merge(time_rows: list[dict], mem_rows: list[dict]) -> list[dict]:
    mem = {(r["tokens"], r["case"]): r for r in mem_rows}
    out = []
    for r in time_rows:
        m = mem.get((r["tokens"], r["case"]), {})
        row = dict(r)
        key = "alloc_peak_fwd_mib" if r["mode"] == "fwd" else "alloc_peak_fwdbwd_mib"
        if key in m:
            row["peak_alloc_mib"] = m[key]
        if r["mode"] == "fwd+bwd" and "rss_peak_fwdbwd_mib" in m:
            row["peak_rss_mib"] = m["rss_peak_fwdbwd_mib"]
        if "memory_phase_s" in m:
            row["memory_phase_s"] = m["memory_phase_s"]
        out.append(row)
    by = {(r["tokens"], r["case"], r["mode"]): r for r in out}
    for r in out:
        peer = Case(r["loss"], r["scope"], "").peer
        p = by.get((r["tokens"], peer, r["mode"])) if peer else None
        if p is None:
            continue
        for k, kr in (("peak_alloc_mib", "mem_ratio_vs_peer"), ("peak_rss_mib", "rss_ratio_vs_peer")):
            if k in r and k in p and p[k] > 0:
                r[kr] = r[k] / p[k]
    return out


def _verdict(ratios: list[float], target: float) -> str:
    """"yes" when every ratio meets the target, else "NO (by x%)" for the worst one."""
    worst = max(float(r) for r in ratios)
    return "yes" if worst <= target else f"NO (+{100 * (worst / target - 1):.0f}%)"


def render(rows: list[dict], env: dict, out_dir: Path, stem: str, targets: tuple[float, float]) -> None:
    t_target, m_target = targets
    f = lambda v, d=1: "" if v is None or v == "" else f"{float(v):.{d}f}"  # noqa: E731
    head = ["tokens", "case", "fwd ms", "fwd ratio", "fwd peak MiB", "fwd mem ratio", "fwd+bwd ms", "fwd+bwd ratio",
            "fwd+bwd peak MiB", "fwd+bwd mem ratio", "RSS peak MiB", "RSS ratio"]
    by = {(r["tokens"], r["case"], r["mode"]): r for r in rows}
    body = []
    for n in sorted({r["tokens"] for r in rows}):
        for c in [c.key for c in CASES]:
            a, b = by.get((n, c, "fwd"), {}), by.get((n, c, "fwd+bwd"), {})
            if not a and not b:
                continue
            body.append([C.fmt_size(n), c, f(a.get("time_ms_median"), 2), f(a.get("time_ratio_vs_peer"), 3),
                         f(a.get("peak_alloc_mib")), f(a.get("mem_ratio_vs_peer"), 3), f(b.get("time_ms_median"), 2),
                         f(b.get("time_ratio_vs_peer"), 3), f(b.get("peak_alloc_mib")),
                         f(b.get("mem_ratio_vs_peer"), 3), f(b.get("peak_rss_mib")), f(b.get("rss_ratio_vs_peer"), 3)])
    # headline: SAT[micro] and SAT[global] vs vanilla, SAT-GSPO vs gspo, forward+backward, sizes >= 1M
    hl_head = ["tokens", "case", "time ratio (fwd+bwd)", "paired", "CPU-time ratio", "peak-alloc ratio", "RSS ratio",
               f"time <= {t_target}x (wall and CPU)", f"mem <= {m_target}x (alloc and RSS)"]
    hl = []
    for n in sorted({r["tokens"] for r in rows}):
        for c in [c.key for c in CASES if c.peer]:
            b = by.get((n, c, "fwd+bwd"))
            if b is None or "time_ratio_vs_peer" not in b:
                continue
            tr, mr = b["time_ratio_vs_peer"], b.get("mem_ratio_vs_peer")
            times = [tr, b.get("cpu_ratio_vs_peer", tr)]
            mems = [v for v in (mr, b.get("rss_ratio_vs_peer")) if v not in (None, "")]
            hl.append([C.fmt_size(n), c, f(tr, 3), f(b.get("time_ratio_paired_median"), 3),
                       f(b.get("cpu_ratio_vs_peer"), 3), f(mr, 3), f(b.get("rss_ratio_vs_peer"), 3),
                       _verdict(times, t_target) if n >= 1 << 20 else "-",
                       _verdict(mems, m_target) if n >= 1 << 20 else "-"])
    # the global gate scope's extra cost over the micro scope, same loss
    gl_head = ["tokens", "loss", "global / micro time (fwd+bwd)", "global / micro peak alloc"]
    gl = []
    for n in sorted({r["tokens"] for r in rows}):
        for loss in ("sat", "sat_gspo"):
            g, m = by.get((n, f"{loss}[global]", "fwd+bwd")), by.get((n, f"{loss}[micro]", "fwd+bwd"))
            if g and m:
                gl.append([C.fmt_size(n), loss, f(g["time_ms_median"] / m["time_ms_median"], 3),
                           f(g["peak_alloc_mib"] / m["peak_alloc_mib"], 3) if m.get("peak_alloc_mib") else ""])
    note = ("Ratios are SAT's median over its peer's median in the same run (peer: `vanilla` for `sat`, `gspo` for "
            "`sat_gspo`); `paired` is the median of the per-repetition ratios; `CPU-time` is the same ratio on the process CPU "
            "time (on shared cores the steadier figure: time preempted by other jobs is not counted). Peak memory is above the live "
            "inputs; `peak` = torch CPU allocator live-bytes peak from the profiler's memory events (CUDA: "
            "max_memory_allocated), `RSS` = VmHWM delta in a fresh process. Targets apply from 1M tokens up.")
    C.write_md(out_dir / f"{stem}.md", "bench_loss: SAT vs verl's vanilla / gspo", env,
               [("Headline (forward+backward)", C.md_table(hl_head, hl) + "\n\n" + note),
                ("The global gate scope's extra cost", C.md_table(gl_head, gl)),
                ("All measurements (medians)", C.md_table(head, body))])
    plot(rows, out_dir / f"{stem}.png", env)


def plot(rows: list[dict], path: Path, env: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    by = {(r["tokens"], r["case"], r["mode"]): r for r in rows}
    sizes = sorted({r["tokens"] for r in rows})
    for c in CASES:
        xs = [n for n in sizes if (n, c.key, "fwd+bwd") in by]
        axes[0].loglog(xs, [by[(n, c.key, "fwd+bwd")]["time_ms_median"] for n in xs], marker="o", label=c.key)
        if c.peer:
            for ax, k, ls in ((axes[1], "time_ratio_vs_peer", "-"), (axes[2], "mem_ratio_vs_peer", "-")):
                ys = [(n, by[(n, c.key, "fwd+bwd")].get(k)) for n in xs]
                ys = [(n, y) for n, y in ys if y is not None]
                if ys:
                    ax.semilogx([n for n, _ in ys], [y for _, y in ys], marker="o", ls=ls, label=c.key)
    axes[0].set(title="forward+backward time (median)", xlabel="tokens", ylabel="ms")
    axes[1].axhline(TARGETS[0], color="k", ls=":", lw=1, label=f"target {TARGETS[0]}x")
    axes[1].set(title="time / peer (vanilla or gspo)", xlabel="tokens", ylabel="ratio")
    axes[2].axhline(TARGETS[1], color="k", ls=":", lw=1, label=f"target {TARGETS[1]}x")
    axes[2].set(title="peak memory / peer (fwd+bwd)", xlabel="tokens", ylabel="ratio")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{env['device']} | torch {env['torch']} | threads {env['torch_threads']} | {env['date']}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------- main


def default_reps(n: int) -> int:
    return 9 if n <= 1 << 18 else 7 if n <= 1 << 22 else 5 if n <= 1 << 24 else 3


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=None, help=f"comma list of token counts (default {DEFAULT_SIZES})")
    ap.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, 3 repetitions")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per size (default: 9 small ... 3 at 64M)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("SAT_BENCH_THREADS", "1")),
                    help="torch CPU threads (default 1: the cores here are shared, 1 thread is the stable figure)")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-rss", action="store_true", help="CPU: only the allocator peak, not the RSS cross-check")
    ap.add_argument("--modes", default="fwd,fwd+bwd", help="timed modes (comma list of fwd, fwd+bwd)")
    ap.add_argument("--cases", default=None, help="comma list of case keys (default all), e.g. vanilla,sat[micro]")
    ap.add_argument("--out", default=str(C.RESULTS))
    ap.add_argument("--stem", default=None, help="result file stem (default bench_loss_<device>)")
    ap.add_argument("--mem-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mem_worker:
        return mem_worker(args)

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
    torch.set_num_threads(args.threads)
    sizes = [C.parse_size(s) for s in (args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES)).split(",")]
    backend = init_one_rank_group(device)
    env = C.environment(device, collective_backend=f"{backend} (1 rank)", seq_len=args.seq_len)  # at the start
    cases = [c for c in CASES if args.cases is None or c.key in args.cases.split(",")]
    runner = Runner(cases, device)
    equal = equality_check(device)
    print(f"device={C.device_description(device)} backend={backend} c_min=1 bit-for-bit vs verl: {equal}", flush=True)

    runner.set_inputs(make_inputs(1 << 16, args.seq_len, device))  # warm every case once
    for c in cases:
        runner.call(c, True)()
    time_rows, mem_rows = [], []
    modes = tuple(m for m in ("fwd", "fwd+bwd") if m in args.modes.split(","))
    for n in sizes:
        t0 = time.perf_counter()
        reps = args.reps or (3 if args.quick else default_reps(n))
        runner.set_inputs(make_inputs(n, args.seq_len, device))
        rows = time_size(runner, n, reps, device, modes)
        for r in rows:
            r["timing_phase_s"] = time.perf_counter() - t0
        time_rows += rows
        for r in rows:
            if r["mode"] == "fwd+bwd":
                print(f"{C.fmt_size(n):>5} {r['case']:18s} fwd+bwd {r['time_ms_median']:10.2f} ms"
                      + (f"  x{r['time_ratio_vs_peer']:.3f} vs peer" if "time_ratio_vs_peer" in r else ""), flush=True)
        if device.type == "cuda" and not args.no_memory:
            mem_rows += memory_rows_cuda(runner, n)
        runner.x = None
    if device.type == "cpu" and not args.no_memory:
        mem_rows = run_mem_subprocess(args, sizes)
    rows = merge(time_rows, mem_rows)
    env.update(sat_c_min_1_bit_for_bit_vs_verl=str(equal), finished=C.environment(device)["date"],
               memory_method=("torch.cuda.max_memory_allocated" if device.type == "cuda" else
                              "profiler memory events (torch CPU allocator) + RSS VmHWM delta, fresh process"))
    out = Path(args.out)
    stem = args.stem or f"bench_loss_{device.type}"
    C.write_csv(out / f"{stem}.csv", rows, env)
    render(rows, env, out, stem, TARGETS)
    print(f"wrote {out / stem}.csv/.md/.png")


if __name__ == "__main__":
    main()
