"""SAT's gate rate at real response lengths: SAT-GSPO (Eq. 20, broadcast) against SAT-GRPO, per micro-batch.

The quantile of Eq. 14 runs over each micro-batch's active tokens (Table 10, the paper's scope). SAT-GSPO's
score is one value per response, broadcast to its tokens, so tokens tie within a response: a response whose
|d| is above the quantile is gated whole, and a micro-batch whose highest-|d| response holds 10% or more of its
tokens gates nothing. With verl's dynamic batching (``ppo_max_token_len_per_gpu`` 32,768 in the 30B example) a
micro-batch holds few long responses, so SAT-GSPO gates less the longer the responses get.

Setup, per mean response length (default 1.5k, 3k, 6k, 12k tokens):
  * ``--batches`` mini-batches of ``--responses`` responses (default 4 x 512): response lengths log-normal
    (sigma ``--sigma`` 0.7) with that mean, prompts of 300 tokens, prompt + response capped at 32,768 (the
    example's max_model_len);
  * micro-batches made by verl's own ``rearrange_micro_batches`` (dynamic batching, 32,768 tokens);
  * per-token log-ratios log pi - log pi_old: i.i.d. normal; two models of a response's sequence score d
    (what SAT-GSPO gates on): ``mean`` = the mean of its token log-ratios (|d| shrinks like 1/sqrt(length):
    short responses are gated first) and ``iid`` = an independent draw per response (length plays no part);
  * GRPO advantages +-1 per response;
  * the package's own losses (``sat_ext.core.sat_gspo_loss`` / ``sat_token_loss``, the paper's defaults:
    alpha 0.9, inverse-CDF quantile, micro-batch scope) on each micro-batch; their ``gate_rate`` metric.
Reported: the mean over micro-batches of ``gate_rate`` (what verl logs as ``actor/sat/gate_rate``), the share of
micro-batches that gate nothing, and the responses per micro-batch.

    python benchmarks/bench_gspo_gate.py           # ~2 min on 2 cores
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

PROMPT = 300
MAX_TOKENS = 32768  # ppo_max_token_len_per_gpu and max_model_len of examples/verl_aime_qwen3_30b
TOKEN_SD = 0.05  # per-token log-ratio spread (the gate rate does not depend on the scale)


def lengths(n: int, mean: float, sigma: float, gen: torch.Generator) -> torch.Tensor:
    """Response lengths: log-normal with the given mean, prompt + response <= MAX_TOKENS."""
    mu = math.log(mean) - sigma**2 / 2
    raw = torch.exp(torch.randn(n, generator=gen, dtype=torch.float64) * sigma + mu)
    return raw.round().long().clamp(8, MAX_TOKENS - PROMPT)


def micro_batches(resp_len: torch.Tensor) -> list[list[int]]:
    """verl's dynamic batching of these sequences (prompt + response tokens) into <= MAX_TOKENS micro-batches."""
    from tensordict import TensorDict
    from verl.utils.seqlen_balancing import rearrange_micro_batches

    total = resp_len + PROMPT
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), total.cumsum(0)])
    ids = torch.nested.nested_tensor_from_jagged(torch.zeros(int(offsets[-1]), dtype=torch.uint8), offsets)
    _, index = rearrange_micro_batches(TensorDict({"input_ids": ids}, batch_size=[len(total)]), MAX_TOKENS)
    return [list(map(int, part)) for part in index]


def gate_rates(resp_len: torch.Tensor, parts: list[list[int]], model: str, gen: torch.Generator) -> dict:
    from sat_ext.core import SATConfig, sat_gspo_loss, sat_token_loss

    out = {"sat_gspo": [], "sat_grpo": []}
    for part in parts:
        lens = resp_len[part]
        width = int(lens.max())
        mask = torch.arange(width)[None, :] < lens[:, None]
        noise = torch.randn(len(part), width, generator=gen) * TOKEN_SD * mask
        if model == "iid":  # each response's mean replaced by an independent draw
            seq_mean = noise.sum(-1, keepdim=True) / lens[:, None]
            noise = (noise - seq_mean + torch.randn(len(part), 1, generator=gen) * TOKEN_SD / 30) * mask
        old = torch.full((len(part), width), -1.0)
        adv = (torch.randint(0, 2, (len(part), 1), generator=gen) * 2 - 1).float().expand(-1, width)
        gspo = sat_gspo_loss(old + noise, old, adv, mask, SATConfig(dual_clip=None))
        grpo = sat_token_loss(old + noise, old, adv, mask, SATConfig())
        out["sat_gspo"].append(float(gspo.metrics["gate_rate"]))
        out["sat_grpo"].append(float(grpo.metrics["gate_rate"]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--means", default="1500,3000,6000,12000", help="mean response lengths (tokens)")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--responses", type=int, default=512, help="responses per mini-batch")
    p.add_argument("--sigma", type=float, default=0.7, help="log-normal sigma of the response lengths")
    p.add_argument("--out", type=Path, default=C.RESULTS)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    env = C.environment(
        torch.device("cpu"),
        batches=str(args.batches),
        responses=str(args.responses),
        sigma=str(args.sigma),
        micro_batch_tokens=str(MAX_TOKENS),
    )
    rows = []
    for mean in map(int, args.means.split(",")):
        gen = torch.Generator().manual_seed(mean)
        batches = []
        for _ in range(args.batches):
            resp_len = lengths(args.responses, mean, args.sigma, gen)
            batches.append((resp_len, micro_batches(resp_len)))
        for model in ("mean", "iid"):
            rates = {"sat_gspo": [], "sat_grpo": []}
            per_micro = []
            for resp_len, parts in batches:
                got = gate_rates(resp_len, parts, model, gen)
                for loss in rates:
                    rates[loss] += got[loss]
                per_micro += [len(part) for part in parts]
            for loss, values in rates.items():
                row = {
                    "mean_len": mean,
                    "d_model": model,
                    "loss": loss,
                    "micro_batches": len(values),
                    "responses_per_micro": statistics.mean(per_micro),
                    "measured_mean_len": float(torch.cat([b[0] for b in batches]).double().mean()),
                    "gate_rate_mean": statistics.mean(values),
                    "micro_batches_gating_nothing": sum(v == 0 for v in values) / len(values),
                }
                rows.append(row)
                print(
                    f"mean {mean:>6} d={model:<4} {loss:<8} gate rate {row['gate_rate_mean']:.4f}, nothing gated in "
                    f"{row['micro_batches_gating_nothing']:.0%} of {len(values)} micro-batches "
                    f"({row['responses_per_micro']:.1f} responses each)",
                    flush=True,
                )
    C.write_csv(args.out / "bench_gspo_gate.csv", rows, env)
    table = C.md_table(
        [
            "mean response length",
            "d of a response",
            "loss",
            "gate rate (mean over micro-batches)",
            "micro-batches gating nothing",
            "responses per micro-batch",
            "micro-batches",
        ],
        [
            [
                r["mean_len"],
                r["d_model"],
                r["loss"],
                f"{r['gate_rate_mean']:.2%}",
                f"{r['micro_batches_gating_nothing']:.0%}",
                f"{r['responses_per_micro']:.1f}",
                r["micro_batches"],
            ]
            for r in rows
        ],
    )
    C.write_md(
        args.out / "bench_gspo_gate.md",
        "SAT's gate rate per micro-batch at real response lengths",
        env,
        [
            ("Gate rate", table),
            (
                "Reading",
                "SAT-GRPO gates ~10% of each micro-batch's tokens at every length (1 - alpha, Eq. 14, "
                "no ties). SAT-GSPO gates whole responses and only those whose tokens, together, stay under "
                "10% of the micro-batch's: the fewer responses a 32k-token micro-batch holds, the less it "
                "gates. `mean`: a response's d is the mean of its token log-ratios (short responses have the "
                "largest |d| and are gated first); `iid`: d independent of length.",
            ),
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
