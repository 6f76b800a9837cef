"""Throughput and lag-vs-length of the lag rules: a discrete-event simulation (simulated clock) driving the real
:class:`sat_ext.lag.LagController` (whose ``take`` is :mod:`sat_ext.lag.batches`' selection, the code the verl
sampler uses), with long-tailed generation lengths.

Model. ``P`` rollout slots each generate one sample at a time; a sample of ``n`` tokens takes
``prefill + n * per_token`` seconds (lengths: log-normal, capped at ``max_len``: a long tail of stragglers).
A sample is generated entirely by the weights of the version it was claimed at (no partial rollout). The
trainer takes batches of ``B`` samples from the controller; a step lasts ``step_fixed + tokens * per_token_train``
seconds, then, when the controller says a sync is due and allowed, a weight sync lasts ``sync`` seconds.

Configurations, all through the controller's own admission control:
  * ``sync``: synchronous training (interval mode, interval 1, prefetch 0: a batch is generated after the
    previous step's sync);
  * ``lag 1``: interval 1, prefetch 1 (the paper's lag 1, slime's one-step overlap, verl's one_step_off);
  * ``lag 8``: interval 8, prefetch 1 (the paper's lag 8: a broadcast every 8 steps, batch-wise lags 1..8);
  * ``bounded L wait|drop``: bounded mode, max_lag L in {1, 8} (a sync after every step; admission holds a
    producer back when its sample could be trained on more than L versions later); ``wait`` consumes first
    in, first out and waits for stragglers, ``drop`` takes what finished first and drops what crosses L.

Reported per configuration over the steps after a warm-up: consumed samples/s as a fraction of the pipeline
limit = min(producer limit P / E[gen time], trainer limit B / (E[step time] + sync)) (E over the length
distribution), the idle fraction of the rollout slots and of the trainer, the lag of consumed samples, and
samples dropped for staleness; and lag against response length: the correlation of a consumed sample's lag
(in trainer steps) with its length, the mean length of consumed samples in the lowest and highest lag, and the
mean length of dropped samples over the mean length generated (the drop rule's length bias).
Deterministic (seeded; no wall clock).

    python benchmarks/bench_lag.py              # two scenarios x 7 configurations, about 3 minutes
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

from sat_ext.lag import LagConfig, LagController, VersionSpan  # noqa: E402


@dataclass(frozen=True)
class Scenario:
    name: str
    slots: int = 64
    batch: int = 256
    median_len: float = 2000.0
    sigma: float = 1.0
    max_len: int = 32768
    per_token: float = 2e-3  # s per generated token per slot
    prefill: float = 0.5
    step_fixed: float = 1.0
    sync: float = 1.0
    trainer_speed: float = 1.0  # trainer limit / producer limit (per_token_train is set from it)

    def draw_len(self, rng: random.Random) -> int:
        return max(1, min(self.max_len, int(rng.lognormvariate(math.log(self.median_len), self.sigma))))

    def gen_time(self, n: int) -> float:
        return self.prefill + n * self.per_token


def expected_len(sc: Scenario, draws: int = 200_000) -> float:
    rng = random.Random(12345)
    return statistics.fmean(sc.draw_len(rng) for _ in range(draws))


def limits(sc: Scenario) -> tuple[float, float, float]:
    """(producer limit, trainer limit, per-token training seconds) in samples/s."""
    e_len = expected_len(sc)
    producer = sc.slots / sc.gen_time(e_len)
    trainer = producer * sc.trainer_speed
    # trainer = B / (step_fixed + B * e_len * a + sync)  ->  a
    a = (sc.batch / trainer - sc.step_fixed - sc.sync) / (sc.batch * e_len)
    if a <= 0:
        raise ValueError(f"scenario {sc.name}: trainer_speed {sc.trainer_speed} not reachable with the fixed costs")
    return producer, trainer, a


CONFIGS = (
    ("sync", dict(mode="interval", interval=1, prefetch=0)),
    ("lag 1", dict(mode="interval", interval=1, prefetch=1)),
    ("lag 8", dict(mode="interval", interval=8, prefetch=1)),
    ("bounded L=1 wait", dict(mode="bounded", max_lag=1, over_bound="wait")),
    ("bounded L=1 drop", dict(mode="bounded", max_lag=1, over_bound="drop")),
    ("bounded L=8 wait", dict(mode="bounded", max_lag=8, over_bound="wait")),
    ("bounded L=8 drop", dict(mode="bounded", max_lag=8, over_bound="drop")),
)


class _Clock:
    now = 0.0


def _correlation(pairs: list[tuple[int, int]]) -> float:
    """Pearson correlation of (lag, length); 0.0 when either is constant."""
    if len(pairs) < 2:
        return 0.0
    xs, ys = zip(*pairs)
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return 0.0
    return statistics.correlation(xs, ys)


def _len_at(pairs: list[tuple[int, int]], pick) -> float:
    lag = pick(x for x, _ in pairs)
    return statistics.fmean(n for x, n in pairs if x == lag)


def simulate(sc: Scenario, lag_kw: dict, steps: int, warmup: int, seed: int) -> dict:
    producer_limit, trainer_limit, per_token_train = limits(sc)
    cfg = LagConfig(batch_size=sc.batch, **lag_kw)
    clock = _Clock()
    ctl = LagController(cfg)
    rng = random.Random(seed)
    events: list[tuple[float, int, str, int]] = []
    seq = 0

    def push(t: float, kind: str, idx: int = -1) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, idx))
        seq += 1

    busy: list[tuple | None] = [None] * sc.slots
    slot_idle_since = [0.0] * sc.slots
    slot_idle = [0.0] * sc.slots
    window_slot_idle = 0.0
    trainer_state, trainer_idle_since, trainer_idle, window_trainer_idle = "wait", 0.0, 0.0, 0.0
    step_tokens = 0
    t_window0 = None
    consumed_window, lags, lag_len = 0, [], []
    gen_started = gen_tokens = 0

    def in_window() -> bool:
        return t_window0 is not None

    def pump() -> None:
        nonlocal trainer_state, trainer_idle_since, trainer_idle, window_trainer_idle, step_tokens
        nonlocal consumed_window, gen_started, gen_tokens, window_slot_idle
        now = clock.now
        if trainer_state == "sync_pending" and ctl.sync_allowed():
            idle = now - trainer_idle_since  # waiting for the sync to be allowed
            trainer_idle += idle
            ctl.note_consumer_idle(idle)
            if in_window():
                window_trainer_idle += idle
            ctl.record_sync()
            push(now + sc.sync, "sync_done")
            trainer_state = "syncing"
        if trainer_state == "wait" and ctl.stats()["ready"] >= sc.batch:  # take() would return None otherwise
            batch = ctl.take()
            if batch:
                idle = now - trainer_idle_since
                trainer_idle += idle
                ctl.note_consumer_idle(idle)
                if in_window():
                    window_trainer_idle += idle
                    consumed_window += len(batch)
                    lags.extend(s.lag_steps for s in batch)
                    lag_len.extend((s.lag_steps, s.payload) for s in batch)
                step_tokens = sum(s.payload for s in batch)
                push(now + sc.step_fixed + step_tokens * per_token_train, "train_done")
                trainer_state = "train"
        for i in range(sc.slots):
            if busy[i] is None:
                claim = ctl.claim()
                if claim is None:
                    break  # admission control holds every further producer back as well
                n = sc.draw_len(rng)
                busy[i] = (claim, n)
                idle = now - slot_idle_since[i]
                slot_idle[i] += idle
                ctl.note_producer_idle(idle)
                if in_window():
                    window_slot_idle += idle
                gen_started += 1
                gen_tokens += n
                push(now + sc.gen_time(n), "gen_done", i)

    pump()
    while events:
        t, _, kind, idx = heapq.heappop(events)
        clock.now = t
        if kind == "gen_done":
            claim, n = busy[idx]
            busy[idx] = None
            slot_idle_since[idx] = t
            ctl.submit(claim, n, VersionSpan.at(claim.version), response_tokens=n)
        elif kind == "train_done":
            due = ctl.complete_step()
            trainer_idle_since = t
            trainer_state = "sync_pending" if due else "wait"
            if ctl.steps_done == warmup:
                t_window0 = t
                # idle already accumulated before the window is not counted; open idle periods start now
                slot_idle_since = [t if busy[i] is None else slot_idle_since[i] for i in range(sc.slots)]
            if ctl.steps_done >= warmup + steps:
                break
        elif kind == "sync_done":
            trainer_idle_since = t
            trainer_state = "wait"
        pump()
    t_end = clock.now
    for i in range(sc.slots):  # close open idle periods
        if busy[i] is None:
            window_slot_idle += t_end - max(slot_idle_since[i], t_window0)
    span = t_end - t_window0
    rate = consumed_window / span
    limit = min(producer_limit, trainer_limit)
    m = ctl.metrics
    return {
        "samples_per_s": rate,
        "pipeline_limit": limit,
        "fraction_of_limit": rate / limit,
        "producer_limit": producer_limit,
        "trainer_limit": trainer_limit,
        "rollout_idle_frac": window_slot_idle / (sc.slots * span),
        "trainer_idle_frac": window_trainer_idle / span,
        "lag_mean": statistics.fmean(lags) if lags else 0.0,
        "lag_max": max(lags) if lags else 0,
        "dropped": m.dropped_total,
        "dropped_frac": m.dropped_total / max(1, gen_started),
        "lag_len_corr": _correlation(lag_len),
        "len_at_min_lag": _len_at(lag_len, min),
        "len_at_max_lag": _len_at(lag_len, max),
        "dropped_len_over_mean": (m.stale_tokens / max(1, m.dropped_total)) / (gen_tokens / gen_started),
        "steps": steps,
        "sim_seconds": span,
    }


SCENARIOS = (
    Scenario("balanced", trainer_speed=1.0),
    Scenario("rollout-bound", trainer_speed=2.0),
)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=2, help="independent seeds per configuration (mean reported)")
    ap.add_argument("--out", default=str(C.RESULTS))
    ap.add_argument("--stem", default="bench_lag")
    args = ap.parse_args(argv)
    rows = []
    for sc in SCENARIOS:
        for name, kw in CONFIGS:
            runs = [simulate(sc, kw, args.steps, args.warmup, seed) for seed in range(args.seeds)]
            row = {"scenario": sc.name, "config": name}
            for k in runs[0]:
                vals = [r[k] for r in runs]
                row[k] = max(vals) if k == "lag_max" else statistics.fmean(vals)
            rows.append(row)
            print(
                f"{sc.name:14s} {name:13s} {row['samples_per_s']:7.3f}/s  {row['fraction_of_limit']:.3f} of limit  "
                f"rollout idle {row['rollout_idle_frac']:.3f}  trainer idle {row['trainer_idle_frac']:.3f}  "
                f"lag {row['lag_mean']:.2f} (max {row['lag_max']})  dropped {row['dropped']:.0f}  "
                f"corr(lag, len) {row['lag_len_corr']:+.3f}",
                flush=True,
            )
    import torch

    params = "; ".join(
        f"{sc.name}: P={sc.slots} slots, B={sc.batch}, len~LogNormal(ln {sc.median_len:.0f}, {sc.sigma}) capped "
        f"{sc.max_len}, gen={sc.prefill}+{sc.per_token * 1e3:.0f}ms/token, step={sc.step_fixed}s+tokens*a, "
        f"sync={sc.sync}s, trainer limit = {sc.trainer_speed}x producer limit"
        for sc in SCENARIOS
    )
    env = C.environment(
        torch.device("cpu"),
        simulation="discrete-event, simulated clock, real LagController",
        steps=f"{args.steps} after {args.warmup} warm-up steps, {args.seeds} seeds (mean)",
        scenarios=params,
    )
    out = Path(args.out)
    C.write_csv(out / f"{args.stem}.csv", rows, env)
    head = [
        "scenario",
        "config",
        "samples/s",
        "fraction of pipeline limit",
        "rollout idle",
        "trainer idle",
        "lag mean (steps)",
        "lag max (steps)",
        "dropped (frac of started)",
    ]
    body = [
        [
            r["scenario"],
            r["config"],
            f"{r['samples_per_s']:.3f}",
            f"{r['fraction_of_limit']:.3f}",
            f"{r['rollout_idle_frac']:.3f}",
            f"{r['trainer_idle_frac']:.3f}",
            f"{r['lag_mean']:.2f}",
            f"{r['lag_max']}",
            f"{r['dropped']:.0f} ({r['dropped_frac']:.3f})",
        ]
        for r in rows
    ]
    lim = C.md_table(
        ["scenario", "producer limit /s", "trainer limit /s", "pipeline limit /s"],
        [
            [r["scenario"], f"{r['producer_limit']:.3f}", f"{r['trainer_limit']:.3f}", f"{r['pipeline_limit']:.3f}"]
            for r in rows
            if r["config"] == "sync"
        ],
    )
    length_head = [
        "scenario",
        "config",
        "corr(lag in steps, length)",
        "mean length at the lowest lag",
        "mean length at the highest lag",
        "dropped mean length / generated mean length",
    ]
    length_body = [
        [
            r["scenario"],
            r["config"],
            f"{r['lag_len_corr']:+.3f}",
            f"{r['len_at_min_lag']:.0f}",
            f"{r['len_at_max_lag']:.0f}",
            f"{r['dropped_len_over_mean']:.2f}" if r["dropped"] else "(none dropped)",
        ]
        for r in rows
    ]
    C.write_md(
        out / f"{args.stem}.md",
        "bench_lag: lag rules, throughput and lag against length (simulated)",
        env,
        [
            ("Limits", lim),
            ("Throughput and idle time", C.md_table(head, body)),
            ("Lag against response length", C.md_table(length_head, length_body)),
        ],
    )
    plot(rows, out / f"{args.stem}.png", env)
    print(f"wrote {out / args.stem}.csv/.md/.png")


def plot(rows: list[dict], path: Path, env: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scen = list(dict.fromkeys(r["scenario"] for r in rows))
    names = [n for n, _ in CONFIGS]
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.8))
    w = 0.8 / len(scen)
    for j, s in enumerate(scen):
        rs = {r["config"]: r for r in rows if r["scenario"] == s}
        xs = [i + j * w for i in range(len(names))]
        axes[0].bar(xs, [rs[n]["fraction_of_limit"] for n in names], w, label=s)
        axes[1].bar(xs, [rs[n]["rollout_idle_frac"] for n in names], w, label=s)
        axes[2].bar(xs, [rs[n]["trainer_idle_frac"] for n in names], w, label=s)
    for ax, title in zip(axes, ("samples/s / pipeline limit", "rollout slot idle fraction", "trainer idle fraction")):
        ax.set_xticks([i + w * (len(scen) - 1) / 2 for i in range(len(names))], names, rotation=30, fontsize=8)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].axhline(1.0, color="k", ls=":", lw=1)
    fig.suptitle(f"simulated (real LagController) | {env['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
