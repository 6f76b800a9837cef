"""Read a verl run's step log and check the signals a SAT / lag run must show (``python -m sat_ext.check_run``).

The checks also read OpenRLHF's step metrics (``sat-ext smoke openrlhf``): :class:`MetricNames` says how each
framework spells what they read (verl: ``actor/sat/gate_rate``, OpenRLHF: ``sat_gate_rate``); verl's names
below.

Input: verl 0.9.1's file logger (``trainer.logger=[...,file]``: one JSON object ``{"step": N, "data": {...}}``
per line; orjson writes NaN and Inf as ``null``) or its console logger (``step:N - key:value - ...``, one
line per step, any prefix such as Ray's ``(TaskRunner pid=...)`` before ``step:``). Training records are the
steps that carry ``actor/`` keys (validation-only records are skipped).

Checks (each PASS, FAIL or SKIP with the reason):

- ``sat active``: ``actor/sat/active`` = 1 on every training step of a SAT run; absent or 0 on a baseline.
- ``gate rate``: ``actor/sat/gate_rate`` <= 1 - alpha = 0.1 on every step (Eq. 14 with the inverse-CDF
  quantile and the strict gate can never gate more: at most n - ceil(0.9 n) tokens lie above the ceil(0.9 n)-th
  smallest |d|), and at steady state (medians) q = ``actor/sat/threshold_q`` > 0 and a gate rate >= 0.01
  (:data:`GATE_RATE_FLOOR`). q = 0 means at least 90% of |d| are exactly 0: the ratio's denominator is the
  current policy, not the rollout checkpoint. A median gate rate below ``gate_rate_min`` (0.05 by default) with
  q > 0 passes with a warning, as ties at q give (Table 10: "ties can make it smaller than 10%"); they are common
  when the log-probs come from a bf16 forward (verl's FSDP default ``mixed_precision.param_dtype``), which puts
  |d| on a coarse grid. Where q is missing or non-finite on a steady step, ``gate_rate_min`` is the floor. (Both
  values are means over a step's micro-batches.) SAT-GSPO
  (``sequence_gate``) gets the ceiling only: its d is one value per response broadcast to the response's tokens,
  so the tokens above the quantile tie within a response, and a micro-batch whose responses each hold more than
  10% of its tokens (fewer than ~10 responses) gates nothing; its zero-d failure shows in ``d_pi``. A SAT-GSPO
  median below ``GSPO_GATE_RATE_WARN`` passes with a warning that says so (at 12k-token responses in 32k-token
  micro-batches it is ~0.4%: benchmarks/results/bench_gspo_gate.md).
- ``inert``: ``actor/sat/inert_frac``, the share of a step's micro-batches whose q reached the trust region's
  radius (SAT then behaves as its base loss); a warning when it is over half on the steady steps, never a failure.
- ``d_pi``: ``actor/sat/d_pi`` (Eq. 52) reported and finite on every step, > 0 at steady state (median).
- ``finite losses``: every ``*loss*`` key and ``actor/grad_norm`` finite on every step, and
  ``actor/sat/nonfinite_frac`` = 0 where reported.
- ``eval count``: the samples per problem of each logged evaluation (verl's ``val-core/<source>/<score>/mean@N``),
  reported, and equal to the run's documented count (``Expectation.eval_n``: the example config's
  ``val_kwargs.n``) on every evaluation; no evaluation at all fails when a count is expected.
- ``lag schedule`` (interval mode): each step's ``lag/steps/{min,mean,max}`` and ``lag/hist/*`` equal what
  :func:`sat_ext.lag.schedule.scheduled_lag` gives for the optimizer steps the record covers (lag 1: every
  batch 1 step old; lag 8: 1, 2, ..., 8; the first window starts at 0), ``lag/off_schedule`` = 0 and
  ``lag/dropped`` = 0.

Steady-state steps: those whose ``lag/steps/min`` >= 1 (without lag metrics: every step after the first). A
lag-0 batch (the first window) is trained on the weights that generated it, so d = 0 and nothing is gated.
With the rollout denominator (``rollout_denominator``: verl's bypass mode, App. E.6) every step counts: d then
includes the engine's own mismatch at every lag.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from sat_ext.lag.schedule import scheduled_lag
from sat_ext.metric_names import VERL_NAMES, MetricNames

ALPHA_TAIL = 0.1  # 1 - alpha, alpha = 0.90 (the paper's quantile)
DEFAULT_GATE_RATE_MIN = 0.05
GATE_RATE_FLOOR = 0.01  # token SAT with q > 0: below this median the gate is off (healthy bf16 runs: 0.03-0.09)
_ZERO_D = "q = 0: at least 90% of |d| are exactly 0, the denominator is the current policy"
GSPO_GATE_RATE_WARN = 0.01  # SAT-GSPO: below this median the gate has almost no effect (a warning, not a fault)
TOL = 1e-6
# An example variant (method, _tis, _r3, _lagN), and run.sh's name for it under App. E.6's denominator switch.
VARIANT_RE = re.compile(
    r"(?P<variant>(?P<sat>sat_)?(?:grpo|gspo|dppo\w*?)(?:_tis)?(?:_r3)?_lag(?P<lag>\d+))(?:_rollout_lp)?$"
)
_CONSOLE_STEP = re.compile(r"step:(\d+) - (.*)$")
_EVAL_KEY = re.compile(r"^val-core/(?P<source>[^/]+)/[^/]+/mean@(?P<n>\d+)$")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")


class RunLogError(ValueError):
    """The log cannot be read, or the expectation cannot be formed; names the file or the setting."""


@dataclass(frozen=True)
class Record:
    """One logged step: ``values`` maps a metric name to a float (NaN for a non-finite or null value)."""

    step: int
    values: dict[str, float]


@dataclass(frozen=True)
class Expectation:
    """What the run should show: SAT on or off (``sequence_gate``: SAT-GSPO's per-response score), the
    interval-mode lag schedule (``interval`` None: not checked) and the evaluation's samples per problem
    (``eval_n`` None: reported, not checked). ``steps_per_record``: optimizer steps one logged step covers
    (None: a whole lag window, as verl logs it; OpenRLHF logs every trainer step)."""

    sat: bool
    sequence_gate: bool = False
    rollout_denominator: bool = False
    interval: int | None = None
    prefetch: int = 1
    gate_rate_min: float = DEFAULT_GATE_RATE_MIN
    gate_rate_max: float = ALPHA_TAIL
    eval_n: int | None = None
    names: MetricNames = VERL_NAMES
    steps_per_record: int | None = None

    @classmethod
    def for_variant(cls, name: str, **overrides) -> Expectation:
        """From an example variant name such as ``sat_gspo_lag8`` (SAT on, interval 8, prefetch 1)."""
        m = VARIANT_RE.search(name)
        if m is None:
            raise RunLogError(f"variant {name!r} is not an example variant name like sat_grpo_lag8 or gspo_lag1")
        sat = bool(m["sat"])
        return cls(**{"sat": sat, "sequence_gate": sat and "gspo" in name, "interval": int(m["lag"]), **overrides})


@dataclass(frozen=True)
class CheckResult:
    """One row of the table: ``passed`` is True, False, or None (skipped); ``warning`` (on a pass) says what to
    look at, without failing the run."""

    name: str
    passed: bool | None
    detail: str
    warning: str = ""


# ------------------------------------------------------------------------------------------------ reading


def _number(value) -> float | None:
    """A logged value as a float (NaN for None / non-finite), or None when it is not a number at all."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = _NUMPY_SCALAR.sub(r"\1", value.strip())
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _clean(data: dict) -> dict[str, float]:
    out = {}
    for key, value in data.items():
        number = _number(value)
        if number is not None:
            out[str(key)] = number
    return out


def _parse_jsonl(path: Path, lines: list[str]) -> list[Record]:
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            records.append(Record(int(obj["step"]), _clean(obj["data"])))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise RunLogError(f'{path}:{i}: not a verl file-logger line ({{"step": N, "data": {{...}}}}): {e}')
    return records


def _parse_console(lines: list[str]) -> list[Record]:
    records = []
    for line in lines:
        m = _CONSOLE_STEP.search(line.rstrip("\n"))
        if m is None:
            continue
        values = {}
        for item in m.group(2).split(" - "):
            key, sep, raw = item.rpartition(":")
            number = _number(raw) if sep else None
            if number is not None:
                values[key.strip()] = number
        records.append(Record(int(m.group(1)), values))
    return records


def read_log(path: str | Path) -> list[Record]:
    """The records of a verl file-logger ``.jsonl`` or a console log (detected from the first non-empty line)."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise RunLogError(f"{path}: cannot read the run log ({e.strerror})") from e
    first = next((line for line in lines if line.strip()), "")
    records = _parse_jsonl(path, lines) if first.lstrip().startswith("{") else _parse_console(lines)
    if not records:
        raise RunLogError(f"{path}: no logged steps (neither verl file-logger JSON lines nor 'step:N - ...' lines)")
    return records


# ----------------------------------------------------------------------------------------------- checking


def training_records(records: list[Record], names: MetricNames = VERL_NAMES) -> list[Record]:
    """The steps that trained (carry a ``names.training`` key, verl: ``actor/``), in log order."""
    return [r for r in records if any(k.startswith(names.training) for k in r.values)]


def _steady(records: list[Record], exp: Expectation) -> list[Record]:
    if exp.rollout_denominator:  # d = log pi - log mu: the engine's mismatch makes it non-zero at every lag
        return records
    if any("lag/steps/min" in r.values for r in records):
        return [r for r in records if r.values.get("lag/steps/min", 0.0) >= 1]
    return records[1:]


def _fmt(values: list[float]) -> str:
    return f"min {min(values):.4g}, median {statistics.median(values):.4g}, max {max(values):.4g}"


def check_sat_active(records: list[Record], exp: Expectation) -> CheckResult:
    key = exp.names.sat_active
    values = [r.values.get(key) for r in records]
    if exp.sat:
        bad = [r.step for r, v in zip(records, values) if v is None or abs(v - 1.0) > TOL]
        return CheckResult(
            "sat active",
            not bad,
            f"{key} = 1 on {len(records) - len(bad)}/{len(records)} "
            "steps" + (f"; not on steps {bad[:5]}" if bad else ""),
        )
    bad = [r.step for r, v in zip(records, values) if v is not None and v != 0.0]
    return CheckResult(
        "sat active",
        not bad,
        f"baseline: {key} absent or 0" + (f"; SAT active on steps {bad[:5]}" if bad else " on every step"),
    )


def _token_gate_floor(steady: list[Record], median: float, exp: Expectation) -> tuple[str, str, str]:
    """Token SAT's lower bound on the gate rate: (what is wanted, why it is missed or "", a warning). With q
    logged on every steady step: median q > 0 and median gate rate >= :data:`GATE_RATE_FLOOR`, and a median
    below ``gate_rate_min`` is a warning (ties at q); otherwise the median gate rate >= ``gate_rate_min``."""
    qs = [r.values.get(exp.names.threshold_q, math.nan) for r in steady]
    unlogged = [r.step for r, q in zip(steady, qs) if not math.isfinite(q)]
    if unlogged:
        key = exp.names.threshold_q
        want = f"median >= {exp.gate_rate_min:g} ({key} missing or non-finite on steps {unlogged[:5]})"
        return want, f"; near 0 means {_ZERO_D}" if median < exp.gate_rate_min else "", ""
    q = statistics.median(qs)
    want = f"median q > 0 and gate rate >= {GATE_RATE_FLOOR:g} (q: {_fmt(qs)})"
    if q <= 0.0:
        return want, f"; {_ZERO_D}", ""
    if median < GATE_RATE_FLOOR:
        return want, f"; the gate is off (median under {GATE_RATE_FLOOR:g}) although q > 0", ""
    warning = ""
    if median < exp.gate_rate_min:
        warning = (
            f"median gate rate {median:.4g} < {exp.gate_rate_min:g} with q > 0 (median {q:.4g}), as ties at q give "
            "(the strict gate |d| > q leaves them out, Table 10): log-probs from a bf16 forward put |d| on a coarse "
            "grid. If the ratio's denominator may be the live weights, compare d_pi with the engine's mismatch"
        )
    return want, "", warning


def check_gate_rate(records: list[Record], exp: Expectation) -> CheckResult:
    name = "gate rate"
    if not exp.sat:
        return CheckResult(name, None, "baseline: no SAT gate")
    key = exp.names.gate_rate
    missing = [r.step for r in records if key not in r.values]
    if missing:
        return CheckResult(name, False, f"{key} missing on steps {missing[:5]}")
    over = [r.step for r in records if not r.values[key] <= exp.gate_rate_max + TOL]
    steady_records = _steady(records, exp)
    steady = [r.values[key] for r in steady_records]
    if not steady:
        return CheckResult(name, False, "no steady-state step (lag/steps/min >= 1) to judge the gate rate on")
    median = statistics.median(steady)
    if exp.sequence_gate:
        floor, miss, warning = "no floor: SAT-GSPO's scores tie within a response", "", ""
    else:
        floor, miss, warning = _token_gate_floor(steady_records, median, exp)
    detail = f"steady state: {_fmt(steady)}; want <= {exp.gate_rate_max:g} every step, {floor}"
    if over:
        detail += f"; above {exp.gate_rate_max:g} (or non-finite) on steps {over[:5]}"
    detail += miss
    if exp.sequence_gate and median < GSPO_GATE_RATE_WARN:
        warning = (
            f"SAT-GSPO's median gate rate {median:.4g} is near 0: its d is one value per response and the "
            "quantile runs over each micro-batch's tokens (Table 10), so a micro-batch whose highest-|d| "
            "response holds 10% or more of its tokens gates nothing; with long responses few fit a "
            "micro-batch (benchmarks/results/bench_gspo_gate.md). The paper's scope, not a fault; d_pi "
            "shows whether the ratio moved"
        )
    return CheckResult(name, not over and not miss, detail, warning)


INERT_WARN = 0.5  # inert on more than this share of the steady steps' micro-batches: a warning


def check_inert(records: list[Record], exp: Expectation) -> CheckResult:
    """SAT could act (q under the trust region's radius) on most steady steps; a warning, not a failure, when it
    could not: SAT then behaves as its base loss (docs/sat.md, "When SAT is inert")."""
    name, key = "inert", exp.names.inert
    if not exp.sat:
        return CheckResult(name, None, "baseline: no SAT")
    steady = [r.values[key] for r in _steady(records, exp) if key in r.values]
    if not steady:
        return CheckResult(name, None, f"{key} not logged on a steady step (a log of sat_ext before 0.2.0)")
    share = sum(steady) / len(steady)
    q = [r.values[exp.names.threshold_q] for r in _steady(records, exp) if exp.names.threshold_q in r.values]
    detail = (
        f"{key} on {len(steady)} steady steps: mean {share:.3g} (the share of micro-batches where SAT could not act)"
    )
    warning = ""
    if share > INERT_WARN:
        warning = (
            f"SAT was inert on most steady steps: the 0.9-quantile of |log r| (q, median "
            f"{statistics.median(q) if q else float('nan'):.3g}) reached the trust region's radius, log(1 + eps_high) "
            "and -log(1 - eps_low) (0.182 and 0.223 at the paper's 0.2), where no token can be newly clipped and SAT's "
            "update is its base loss's, bit for bit. At this staleness SAT is behaving as its base: lower the lag "
            "(lag.interval, lag.max_lag) or the learning rate to bring q under the radius"
        )
    return CheckResult(name, True, detail, warning)


def check_d_pi(records: list[Record], exp: Expectation) -> CheckResult:
    name = "d_pi"
    key = exp.names.d_pi
    if not exp.sat:
        return CheckResult(name, None, f"baseline: the framework's own losses do not report {key}")
    bad = [r.step for r in records if not math.isfinite(r.values.get(key, math.nan))]
    steady = [r.values.get(key, math.nan) for r in _steady(records, exp)]
    steady = [v for v in steady if math.isfinite(v)]
    zero = not steady or statistics.median(steady) <= 0.0
    detail = f"steady state: {_fmt(steady)}" if steady else "no finite steady-state value"
    if bad:
        detail += f"; missing or non-finite on steps {bad[:5]}"
    if steady and zero:
        detail += "; median 0: the ratio never moved off 1"
    return CheckResult(name, not bad and not zero, detail)


def _is_loss_key(key: str, names: MetricNames) -> bool:
    return "loss" in key.rsplit("/", 1)[-1] or key == names.grad_norm


def check_finite(records: list[Record], exp: Expectation) -> CheckResult:
    names = exp.names
    bad = []
    for r in records:
        for key, value in r.values.items():
            if (_is_loss_key(key, names) and not math.isfinite(value)) or (key == names.nonfinite and value != 0.0):
                bad.append(f"{key} = {value:g} at step {r.step}")
    keys = sorted({k for r in records for k in r.values if _is_loss_key(k, names)})
    if not keys:
        return CheckResult("finite losses", False, f"no loss key (…loss…, {names.grad_norm}) in the training steps")
    return CheckResult(
        "finite losses",
        not bad,
        (f"{len(keys)} loss keys finite on every step ({', '.join(keys[:4])}" + (", ...)" if len(keys) > 4 else ")"))
        if not bad
        else "; ".join(bad[:5]),
    )


def _hist_edges(record: Record) -> dict[str, int]:
    """``lag/hist/<bin>`` names -> left edge ("3" -> 3, "8-11" -> 8, "32+" -> 32)."""
    return {k: int(re.match(r"\d+", k[len("lag/hist/") :]).group()) for k in record.values if k.startswith("lag/hist/")}


def _expected_window(trainer_step: int, exp: Expectation) -> list[tuple[int, int]]:
    """Scheduled (lag in versions, lag in steps) of the optimizer steps one record covers."""
    first = trainer_step - (exp.steps_per_record or exp.interval) + 1
    return [scheduled_lag(s, exp.interval, exp.prefetch) for s in range(max(1, first), trainer_step + 1)]


def _lag_problems(r: Record, exp: Expectation) -> list[str]:
    v = r.values
    need = ("lag/trainer_step", "lag/steps/min", "lag/steps/mean", "lag/steps/max", "lag/consumed")
    missing = [k for k in need if k not in v]
    if missing or not _hist_edges(r):
        return [f"step {r.step}: lag metrics missing ({', '.join(missing) or 'lag/hist/*'})"]
    window = _expected_window(int(v["lag/trainer_step"]), exp)
    steps = [s for _, s in window]
    problems = []
    for key, want in (("min", min(steps)), ("max", max(steps)), ("mean", sum(steps) / len(steps))):
        if abs(v[f"lag/steps/{key}"] - want) > TOL:
            problems.append(f"step {r.step}: lag/steps/{key} = {v[f'lag/steps/{key}']:g}, scheduled {want:g}")
    edges = _hist_edges(r)
    per_batch = v["lag/consumed"] / len(window)
    want_hist = dict.fromkeys(edges, 0.0)
    for lag, _ in window:
        key = max((k for k, lo in edges.items() if lag >= lo), key=edges.get)
        want_hist[key] += per_batch
    off = {k: (v[k], w) for k, w in want_hist.items() if abs(v[k] - w) > TOL * max(1.0, w)}
    if off:
        problems.append(f"step {r.step}: lag histogram {sorted(off.items())[:3]} (logged, scheduled)")
    for key in ("lag/off_schedule", "lag/dropped"):
        if v.get(key, 0.0) != 0.0:
            problems.append(f"step {r.step}: {key} = {v[key]:g}")
    return problems


def check_lag_schedule(records: list[Record], exp: Expectation) -> CheckResult:
    name = "lag schedule"
    if exp.interval is None:
        return CheckResult(name, None, "no lag interval expected (pass --interval or a variant name)")
    problems = [p for r in records for p in _lag_problems(r, exp)]
    steady = _steady(records, exp)
    ends = ("lag/steps/min", "lag/steps/max")
    lags = sorted({int(r.values.get(key, -1)) for r in steady for key in ends})
    detail = f"interval {exp.interval}, prefetch {exp.prefetch}: {len(records)} steps" + (
        f", steady-state lag in steps {lags[0]}..{lags[-1]}" if lags else ""
    )
    return CheckResult(
        name,
        not problems,
        detail
        + ("; " + "; ".join(problems[:3]) if problems else "; every step on schedule, off_schedule 0, dropped 0"),
    )


def eval_counts(records: list[Record]) -> dict[int, dict[str, int]]:
    """step -> {data source: samples per problem} of every logged evaluation (``val-core/<source>/*/mean@N``)."""
    out: dict[int, dict[str, int]] = {}
    for r in records:
        for key in r.values:
            m = _EVAL_KEY.match(key)
            if m:
                out.setdefault(r.step, {})[m["source"]] = int(m["n"])
    return out


def check_eval_count(records: list[Record], exp: Expectation) -> CheckResult:
    """On every record (evaluations before training carry no actor/ metrics)."""
    name = "eval count"
    counts = eval_counts(records)
    if not counts:
        return CheckResult(
            name,
            None if exp.eval_n is None else False,
            "no val-core/<source>/<score>/mean@N in the log: no evaluation ran"
            + ("" if exp.eval_n is None else f" (expected mean@{exp.eval_n})"),
        )
    seen = sorted({(source, n) for per_step in counts.values() for source, n in per_step.items()})
    detail = (
        ", ".join(f"mean@{n} on {source}" for source, n in seen)
        + f" at steps {sorted(counts)[:8]}{' ...' if len(counts) > 8 else ''} ({len(counts)} evaluations)"
    )
    if exp.eval_n is None:
        return CheckResult(name, None, detail + "; documented count unknown (pass --example or --eval-n)")
    bad = sorted(step for step, per_step in counts.items() if any(n != exp.eval_n for n in per_step.values()))
    if bad:
        detail += (
            f"; the run's documented count is {exp.eval_n} (the example config's val_kwargs.n), not on "
            f"steps {bad[:5]}: a per-row __rollout_n__ in the data overrides it unless data.custom_cls drops it"
        )
    return CheckResult(name, not bad, detail)


CHECKS = (check_sat_active, check_gate_rate, check_inert, check_d_pi, check_finite, check_lag_schedule)


def check_run(records: list[Record], exp: Expectation) -> list[CheckResult]:
    """Every check of the module doc: the evaluation's on every record (verl's logs), the others on the training
    records."""
    evaluation = [check_eval_count(records, exp)] if exp.names.evaluation else []
    train = training_records(records, exp.names)
    if not train:
        return [
            CheckResult("training steps", False, f"{len(records)} records, none with {exp.names.training} metrics")
        ] + evaluation
    return (
        [CheckResult("training steps", True, f"{len(train)} steps with {exp.names.training} metrics")]
        + [check(train, exp) for check in CHECKS]
        + evaluation
    )


def format_table(results: list[CheckResult]) -> str:
    """A fixed-width PASS / WARN / FAIL / SKIP table, one row per check (a warning on its own line below)."""
    word = {True: "PASS", False: "FAIL", None: "SKIP"}
    width = max(len(r.name) for r in results)
    lines = [f"{'check':<{width}}  result  detail", f"{'-' * width}  ------  ------"]
    for r in results:
        result = "WARN" if r.passed and r.warning else word[r.passed]
        lines.append(f"{r.name:<{width}}  {result:<6}  {r.detail}")
        if r.warning:
            lines.append(f"{'':<{width}}          warning: {r.warning}")
    return "\n".join(lines)
