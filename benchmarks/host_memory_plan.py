"""Host-memory plan of examples/verl_aime_qwen3_30b: per training rank and per node, with the arithmetic.

An ESTIMATE from the model's shapes and the example's settings, not a measurement (no GPU ran it): what each
item holds, where it comes from in verl 0.9.1 / sat_ext, and which changes bring a node under a budget.

Items (GB = 1e9 bytes; one node, 4 training ranks at TP 4 / EP 4 / ETP 1, data parallel 1):
  * CPU optimizer (Megatron's hybrid optimizer, offload fraction 1.0, precision-aware, fp32 grads and moments):
    fp32 master + exp_avg + exp_avg_sq (12 B) and the fp32 gradient copy (4 B) per parameter of the rank;
  * reference model, offloaded between its passes (``ref.megatron.param_offload``): bf16, 2 B per parameter;
  * kept weights for the paper's denominator (sat_ext's BroadcastWeights through verl's
    ``copy_megatron_model_to_cpu``, megatron_utils.py:1910): one pinned bf16 copy of the rank's parameters per
    kept version (interval mode, prefetch 1: 2 versions), plus, at a save, the two pageable temporaries of
    ``.cpu().clone().pin_memory()`` for the buffer being copied (the expert buffer is the largest), or, during
    a restore, the LIVE copy of the current weights (``BroadcastWeights.weights_of``);
  * R3: the experts SGLang routed each token to, int16 [48 layers x top-8] = 768 B per token of prompt and
    response (verl's agent loop, agent_loop.py:131), for every trajectory held in TransferQueue: at lag 8 one
    global step (8 batches of 256 x 16) plus the prefetched batch = 36,864, at lag 1 the current and the
    prefetched batch = 8,192.

Options (none implemented in this repo yet; the README lists the code each needs), applied cumulatively:
  * ``stage``: copy into pinned slots allocated once (``copy_(non_blocking=True)``) instead of
    ``.cpu().clone().pin_memory()``: no pageable temporaries at a save;
  * ``no_live``: put the live weights back from the CPU optimizer's fp32 master (what Megatron does after every
    step) instead of a LIVE copy: one bf16 copy less during a restore;
  * ``spill``: the kept versions on local disk (one file per version and rank, read back at a restore) instead
    of pinned memory;
  * ``uint8_routes``: routed-expert ids as uint8 (128 experts < 256): half of R3's bytes (a verl change).

    python benchmarks/host_memory_plan.py                     # the tables; what 2 / 1.5 / 1 TiB nodes need
    python benchmarks/host_memory_plan.py --budget-gib 768    # the options a 768 GiB node needs
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

GB = 1e9


@dataclass(frozen=True)
class Setup:
    """Qwen3-30B-A3B on the example's node (App. F): shapes from the model's config."""

    layers: int = 48
    experts: int = 128
    top_k: int = 8
    hidden: int = 2048
    expert_ffn: int = 768
    total_params: float = 30.5e9
    tp: int = 4
    ep: int = 4
    ranks: int = 4
    kept_versions: int = 2  # interval mode, prefetch 1 (sat_ext.verl.lag.trainer.kept_versions)
    prompt_tokens: int = 300
    max_tokens: int = 32768
    batch: int = 256 * 16  # trajectories per optimizer step
    disk_gb_per_s: float = 2.0  # local NVMe per rank, sequential (assumed)
    route_bytes: int = 2  # int16 ids

    @property
    def expert_params(self) -> float:
        return self.layers * self.experts * 3 * self.hidden * self.expert_ffn

    @property
    def rank_params(self) -> float:
        return self.expert_params / self.ep + (self.total_params - self.expert_params) / self.tp

    @property
    def copy_gb(self) -> float:
        """One bf16 copy of a rank's parameters."""
        return 2 * self.rank_params / GB

    @property
    def largest_buffer_gb(self) -> float:
        return 2 * self.expert_params / self.ep / GB

    def trajectories(self, lag: int) -> int:
        return (lag + 1) * self.batch  # a global step of `lag` batches plus the prefetched one


def per_rank(s: Setup, options: set[str]) -> dict[str, float]:
    """GB per training rank (the kept weights at their peak: a save, or a restore)."""
    kept = 0.0 if "spill" in options else s.kept_versions * s.copy_gb
    at_save = kept + (0.0 if "stage" in options else 2 * s.largest_buffer_gb)
    at_restore = kept + (0.0 if "no_live" in options else s.copy_gb)
    return {
        "cpu_optimizer": 16 * s.rank_params / GB,
        "reference_model": s.copy_gb,
        "kept_weights_peak": max(at_save, at_restore),
    }


def r3_node_gb(s: Setup, lag: int, mean_response: float | None, options: set[str]) -> float:
    """Routed-expert ids held in TransferQueue on the node (mean_response None: every sequence at the cap)."""
    tokens = s.max_tokens if mean_response is None else s.prompt_tokens + mean_response
    width = 1 if "uint8_routes" in options else s.route_bytes
    return s.trajectories(lag) * tokens * s.layers * s.top_k * width / GB


def node_gb(s: Setup, lag: int, r3: bool, mean_response: float | None, options: set[str]) -> dict[str, float]:
    out = {k: v * s.ranks for k, v in per_rank(s, options).items()}
    out["r3_routes"] = r3_node_gb(s, lag, mean_response, options) if r3 else 0.0
    out["total"] = sum(out.values())
    return out


OPTION_ORDER = ("stage", "no_live", "uint8_routes", "spill")
OPTION_COST = {
    "stage": "none (one pinned slot per kept version, allocated once; a save is one copy instead of three)",
    "no_live": "a restore of the live weights reads the rank's fp32 master (4 B/param) instead of a bf16 copy",
    "uint8_routes": "none (a verl change: agent_loop.py stores int16)",
    "spill": "per broadcast: write {copy:.1f} GB per rank; per restore: read {copy:.1f} GB ({secs:.0f} s at "
    "{rate:g} GB/s per rank); one restore per optimizer step at lag 1, one per 8 at lag 8",
}


def options_for(s: Setup, lag: int, r3: bool, mean_response: float | None, budget_gb: float) -> list[str] | None:
    """The shortest prefix of OPTION_ORDER that fits the budget, or None if even all of them do not."""
    for n in range(len(OPTION_ORDER) + 1):
        chosen = set(OPTION_ORDER[:n])
        if node_gb(s, lag, r3, mean_response, chosen)["total"] <= budget_gb:
            return list(OPTION_ORDER[:n])
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--budget-gib",
        type=float,
        action="append",
        help="node RAM to plan for, in GiB as RAM is sold (default 2048, 1536, 1024)",
    )
    p.add_argument("--mean-response", type=float, default=6000, help="typical mean response length (assumed)")
    p.add_argument("--out", type=Path, default=C.RESULTS)
    args = p.parse_args(argv)
    budgets = args.budget_gib or [2048.0, 1536.0, 1024.0]
    s = Setup()
    env = C.environment(torch.device("cpu"), estimate="arithmetic from the model's shapes; nothing measured")
    rows, table = [], []
    cases = [(lag, r3, length) for lag in (1, 8) for r3 in (True, False) for length in (None, args.mean_response)]
    for lag, r3, length in cases:
        for n in range(len(OPTION_ORDER) + 1):
            chosen = OPTION_ORDER[:n]
            g = node_gb(s, lag, r3, length, set(chosen))
            label = "32k cap" if length is None else f"{length:.0f} mean"
            rows.append(
                {
                    "lag": lag,
                    "r3": r3,
                    "lengths": label,
                    "options": "+".join(chosen) or "none",
                    **{f"{k}_gb": v for k, v in g.items()},
                }
            )
            if n in (0, len(OPTION_ORDER)):
                table.append(
                    [
                        lag,
                        "yes" if r3 else "no",
                        label,
                        "+".join(chosen) or "none (today)",
                        *(
                            f"{g[k]:.0f}"
                            for k in ("cpu_optimizer", "reference_model", "kept_weights_peak", "r3_routes", "total")
                        ),
                    ]
                )
    C.write_csv(args.out / "host_memory_plan.csv", rows, env)
    rank = per_rank(s, set())
    rank_rows = [
        [
            "parameters per rank",
            f"{s.expert_params / 1e9:.2f}B experts / EP {s.ep} + "
            f"{(s.total_params - s.expert_params) / 1e9:.2f}B other / TP {s.tp}",
            f"{s.rank_params / 1e9:.2f}B",
        ],
        ["one bf16 copy", "2 B x parameters", f"{s.copy_gb:.1f} GB"],
        ["CPU optimizer", "(12 + 4) B x parameters", f"{rank['cpu_optimizer']:.1f} GB"],
        ["reference model", "2 B x parameters", f"{rank['reference_model']:.1f} GB"],
        ["kept weights, steady", f"{s.kept_versions} pinned copies", f"{s.kept_versions * s.copy_gb:.1f} GB"],
        [
            "kept weights at a save",
            f"+ 2 pageable temporaries of the expert buffer ({s.largest_buffer_gb:.1f} GB)",
            f"{s.kept_versions * s.copy_gb + 2 * s.largest_buffer_gb:.1f} GB",
        ],
        ["kept weights at a restore", "+ the LIVE copy", f"{(s.kept_versions + 1) * s.copy_gb:.1f} GB"],
        ["R3 per token", f"{s.layers} layers x top-{s.top_k} x int16", f"{s.layers * s.top_k * 2} B"],
    ]
    plans = []
    for budget in budgets:
        for lag, r3, length in cases:
            chosen = options_for(s, lag, r3, length, budget * 2**30 / GB)
            label = "32k cap" if length is None else f"{length:.0f} mean"
            plans.append(
                [
                    f"{budget:.0f} GiB ({budget * 2**30 / GB:.0f} GB)",
                    lag,
                    "yes" if r3 else "no",
                    label,
                    "does not fit" if chosen is None else ("+".join(chosen) or "fits as is"),
                ]
            )
    secs = s.copy_gb / s.disk_gb_per_s
    costs = [[name, OPTION_COST[name].format(copy=s.copy_gb, secs=secs, rate=s.disk_gb_per_s)] for name in OPTION_ORDER]
    C.write_md(
        args.out / "host_memory_plan.md",
        "Host memory of the 30B example per node (ESTIMATE)",
        env,
        [
            ("Per training rank", C.md_table(["item", "arithmetic", "size"], rank_rows)),
            (
                "Per node (4 training ranks), GB",
                C.md_table(
                    [
                        "lag",
                        "R3",
                        "sequence lengths",
                        "options",
                        "CPU optimizer",
                        "reference",
                        "kept weights (peak)",
                        "R3 routes",
                        "total",
                    ],
                    table,
                ),
            ),
            ("Options and their cost", C.md_table(["option", "cost"], costs)),
            (
                "What a node of a given size needs (options in this order, cumulative)",
                C.md_table(["node RAM", "lag", "R3", "sequence lengths", "options needed"], plans),
            ),
        ],
    )
    for row in plans:
        print(" | ".join(map(str, row)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
