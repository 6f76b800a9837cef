"""The demo's rollout engines, per trainer step: the real vLLM engine (float32 and bfloat16) against the
emulated one, on the demo's model and batch (8 prompts x 8 samples x 4 tokens), and the trainer's own step.

Measured per engine: start-up (once per worker process: the demo pools the engine), ``generate`` with and
without R3 routing capture, ``sync`` (the trainer's weights into the engine), the engine's log-prob error
against the trainer's forward of the same weights (max and mean over response tokens, after a sync), and the
share of (token, layer) expert choices where the engine's routing differs from the trainer's (what R3 removes).

    python benchmarks/bench_engine.py            # writes benchmarks/results/bench_engine.{csv,md}
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _common import RESULTS, environment, md_table, write_csv, write_md


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(kind: str, numerics: str, repeats: int) -> dict:
    from sat_ext.demo.engines import Mismatch, engine_for
    from sat_ext.demo.model import build_policy, token_log_probs
    from sat_ext.demo.routing import capture_routing
    from sat_ext.demo.tasks.addition import AdditionTask, response_mask

    task = AdditionTask()
    prompts = task.prompt_ids(task.sample(8, torch.Generator().manual_seed(0))).repeat_interleave(8, 0)
    policy = build_policy(seed=0)
    mismatch = Mismatch(numerics, 0.1 if kind == "emulated" else 0.0)
    t0 = time.perf_counter()
    engine = engine_for(kind, policy, mismatch, seed=0)
    start_s = time.perf_counter() - t0
    g = torch.Generator().manual_seed(1)
    engine.generate(prompts, task.response_len, g)  # warm-up
    gen_s = _median_s(lambda: engine.generate(prompts, task.response_len, g), repeats)
    gen_r3_s = _median_s(lambda: engine.generate(prompts, task.response_len, g, capture_routing=True), repeats)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.01 * torch.randn_like(p))
    sync_s = _median_s(lambda: engine.sync(policy, 1), repeats)
    ro = engine.generate(prompts, task.response_len, g, capture_routing=True)
    with capture_routing(policy, prompts.shape[0]) as trainer_routing, torch.no_grad():
        lp = token_log_probs(policy, prompts, ro.responses)
    mask = response_mask(ro.responses)
    d = (lp - ro.log_probs).abs()[mask]
    fed = prompts.shape[1] + mask.sum(-1) - 1  # positions the engine computed (the last sampled token is not fed)
    valid = torch.arange(ro.routing.shape[2])[None] < fed[:, None]
    same = (torch.stack(trainer_routing).sort(-1).values == ro.routing.sort(-1).values).all(-1)

    opt = torch.optim.AdamW(policy.parameters(), lr=1e-4)

    def train_step():
        loss = -token_log_probs(policy, prompts, ro.responses).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    train_s = _median_s(train_step, repeats)
    engine.close()
    return {
        "engine": kind,
        "numerics": numerics,
        "start_s": start_s,
        "generate_ms": 1e3 * gen_s,
        "generate_r3_ms": 1e3 * gen_r3_s,
        "sync_ms": 1e3 * sync_s,
        "trainer_step_ms": 1e3 * train_s,
        "logprob_err_max": float(d.max()),
        "logprob_err_mean": float(d.mean()),
        "routing_differs": float(1 - same[:, valid].float().mean()),
    }


def main() -> None:
    from sat_ext.demo.engines.vllm_engine import vllm_available

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cases = [("emulated", "bf16"), ("emulated", "fp32")]
    if vllm_available()[0]:
        cases = [("vllm", "fp32"), ("vllm", "bf16"), *cases]
    rows = [measure(kind, numerics, args.repeats) for kind, numerics in cases]
    env = environment(
        torch.device("cpu"), repeats=str(args.repeats), batch="8 prompts x 8 samples x 4 tokens", trainer_threads="1"
    )
    write_csv(RESULTS / "bench_engine.csv", rows, env)
    header = [
        "engine",
        "numerics",
        "start (s)",
        "generate (ms)",
        "generate + R3 capture (ms)",
        "sync (ms)",
        "trainer fwd+bwd+step (ms)",
        "log-prob error max / mean",
        "routing differs",
    ]
    table = md_table(
        header,
        [
            [
                r["engine"],
                r["numerics"],
                f"{r['start_s']:.1f}",
                f"{r['generate_ms']:.0f}",
                f"{r['generate_r3_ms']:.0f}",
                f"{r['sync_ms']:.0f}",
                f"{r['trainer_step_ms']:.0f}",
                f"{r['logprob_err_max']:.1e} / {r['logprob_err_mean']:.1e}",
                f"{100 * r['routing_differs']:.2f}%",
            ]
            for r in rows
        ],
    )
    write_md(
        RESULTS / "bench_engine.md",
        "Rollout engines of the CPU demo, per trainer step",
        env,
        [
            (
                "Medians over repeats; log-prob error = |engine - trainer forward| of the engine's own samples "
                "right after a sync (the emulated engine's includes its perturbed routers); routing differs = "
                "share of (token, layer) top-k choices the engine made differently from the trainer",
                table,
            )
        ],
    )
    print(table)


if __name__ == "__main__":
    main()
