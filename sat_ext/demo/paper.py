"""The paper's figures the demo puts beside its own: Table 1 (AIME24 and d_pi at lags 1 and 8) and Table 8
(the sampled log-ratio's variance), and the calibration table of a summary."""

from __future__ import annotations

import math

from .methods import Method

# Paper Table 1: (AIME24 best, lag 1), (AIME24 best, lag 8), (d_pi lag 1), (d_pi lag 8).
PAPER_TABLE1: dict[str, tuple[float, float, float, float]] = {
    "vanilla": (31.25, 30.17, 0.0103, 0.0110),
    "gspo": (32.25, 31.46, 0.0097, 0.0109),
    "vanilla+r3": (31.83, 29.58, 0.0058, 0.0218),
    "gspo+r3": (34.00, 33.13, 0.0091, 0.0158),
    "vanilla+tis": (31.62, 31.46, 0.0108, 0.0169),
    "gspo+tis": (32.88, 31.21, 0.0151, 0.0208),
    "vanilla+tis+r3": (31.79, 31.79, 0.0048, 0.0081),
    "gspo+tis+r3": (31.88, 32.92, 0.0054, 0.0068),
    "dppo_tv": (33.96, 32.71, 0.0108, 0.0118),
    "sat": (32.71, 32.08, 0.0101, 0.0108),
    "sat_gspo": (34.17, 32.71, 0.0095, 0.0107),
    "sat+r3": (33.75, 33.13, 0.0056, 0.0079),
    "sat_gspo+r3": (35.83, 34.79, 0.0056, 0.0076),
}
# Paper Table 8: variance of the sampled log-ratio for GRPO, trainer-side (checkpoint) denominator and the
# rollout-log-prob denominator (App. E.6), at lag 1 and lag 8.
PAPER_LOGRATIO_VAR = {"checkpoint": (2.6e-4, 1.4e-4), "rollout": (3.2e-4, 2.7e-4)}
GRPO = Method("vanilla")


def _cell(by: dict, method: Method, lag: int, field: str, fmt: str) -> str:
    r = by.get((method, lag))
    return "—" if r is None or not math.isfinite(r[field]) else format(r[field], fmt)


def paper_lines(rows: list[dict], denominator: str) -> list[str]:
    """The paper's figures beside the demo's: the calibration (Table 1's d_pi and Table 8's log-ratio variance
    at lag 1 and 8) and Table 1's AIME24 column beside the demo's final reward, for every method that ran."""
    by = {(r["method"], r["lag"]): r for r in rows}
    methods = [m for m in dict.fromkeys(r["method"] for r in rows) if m.key in PAPER_TABLE1]
    lags = sorted({r["lag"] for r in rows})
    if not methods or not {1, 8} & set(lags):
        return []
    var_l1, var_l8 = PAPER_LOGRATIO_VAR[denominator]
    lines = [
        "Calibration against the paper (lag 1 and lag 8; the demo's d_pi = mean |log pi - log mu| over the "
        "trailing 25% of each run, the paper's = Table 1's last-epoch mean; log-ratio variance = variance of "
        f"the loss's log-ratio with the {denominator} denominator, Table 8 for GRPO):",
        "",
        "| method | paper d_pi lag 1 | demo d_pi lag 1 | paper d_pi lag 8 | demo d_pi lag 8 | "
        "paper AIME24 lag 1 / 8 | demo final reward lag 1 / 8 |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in methods:
        p = PAPER_TABLE1[m.key]
        lines.append(
            f"| {m.label} | {p[2]:.4f} | {_cell(by, m, 1, 'd_pi_tail', '.4f')} | {p[3]:.4f} | "
            f"{_cell(by, m, 8, 'd_pi_tail', '.4f')} | {p[0]:.2f} / {p[1]:.2f} | "
            f"{_cell(by, m, 1, 'final_mean', '.3f')} / {_cell(by, m, 8, 'final_mean', '.3f')} |"
        )
    if GRPO in methods:
        lines.append(
            f"| GRPO log-ratio variance (Table 8) | {var_l1:.1e} | {_cell(by, GRPO, 1, 'log_ratio_var', '.1e')}"
            f" | {var_l8:.1e} | {_cell(by, GRPO, 8, 'log_ratio_var', '.1e')} | | |"
        )
        lines.append(
            f"| GRPO engine mismatch at equal weights, mean abs(log pi^(l) - log mu) | — | "
            f"{_cell(by, GRPO, 1, 'engine_mismatch', '.4f')} | — | "
            f"{_cell(by, GRPO, 8, 'engine_mismatch', '.4f')} | | |"
        )
    lines += [
        "",
        "AIME24 (30B model, pass@1 %) and the demo's exact-match reward are different scales: compare "
        "orderings, not values. The paper's cells are one seed each.",
        "",
    ]
    return lines
