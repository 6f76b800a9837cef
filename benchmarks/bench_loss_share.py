"""What the policy loss costs next to the model it trains: one loss call against one forward+backward of a model.

The paper leaves open what its proxy costs at scale. verl calls the loss once per micro-batch, after the
actor's forward has turned the micro-batch's logits into per-token log-probs and before the backward through
the model, so what SAT adds to a training step is its loss call's time over its peer's. This script measures,
at the same token counts as ``bench_loss.py`` (its ragged micro-batch, rows of at most 4096 tokens):

* ``model_step_ms``: a forward of a randomly initialised Hugging Face model (architecture ``--model``, the
  number of layers ``--layers``, no download) to per-token log-probs (log-softmax of the logits in float32,
  gathered at the tokens, as verl's actor computes them) and the backward of their masked sum through the model;
* ``loss_ms``: one call of each loss through verl's registry, forward+backward, on those log-probs detached (the
  ``bench_loss.py`` call);
* ``loss_share_of_step``: ``loss_ms / (model_step_ms + loss_ms)``; and, for SAT, ``extra_share_of_step``: its
  ``loss_ms`` less its peer's over the peer's step (``model_step_ms`` + the peer's ``loss_ms``).

Repetitions interleave the model step and the loss calls (in a rotating order, each loss called once untimed
before its timed call: on the CPU here the first calls after a model step are sometimes much slower, cold
caches, which this figure leaves out); medians. Results: ``<stem>.csv`` in long format
(device, loss, peer, tokens, metric, value) and ``<stem>.md``.

    python benchmarks/bench_loss_share.py --device cuda --sizes 2K,8K,32K      # Qwen3-0.6B's 28 layers, bf16
    python benchmarks/bench_loss_share.py --layers 2 --sizes 2K --reps 5       # the 2-core CPU here (float32)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import bench_loss as B  # noqa: E402

MODELS = {
    # Qwen/Qwen3-0.6B's config.json (the architecture only; the weights are random)
    "qwen3-0.6b": dict(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
    ),
}
CASES = ("vanilla", "sat[micro]", "gspo", "sat_gspo[micro]")


def build_model(name: str, layers: int | None, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """The architecture ``name`` with random weights (``layers`` overrides its depth), in training mode."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    spec = dict(MODELS[name])
    if layers is not None:
        spec["num_hidden_layers"] = layers
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**spec, attn_implementation="sdpa", use_cache=False))
    return model.to(device=device, dtype=dtype).train()


def token_log_probs(model: torch.nn.Module, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token log-probs of ``targets`` under the model fed ``ids`` (float32 log-softmax, as verl's actor)."""
    logits = model(input_ids=ids).logits
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def model_step(model: torch.nn.Module, ids: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor):
    """One forward to log-probs and the backward of their masked sum (the loss itself left out)."""

    def run():
        lp = token_log_probs(model, ids, targets)
        torch.where(mask, lp, 0.0).sum().backward()
        model.zero_grad(set_to_none=True)

    return run


def measure(model, runner: B.Runner, cases: list[B.Case], n: int, reps: int, device: torch.device) -> dict:
    """{"model": [seconds], case key: [seconds]} for ``reps`` interleaved repetitions at ``n`` tokens."""
    x = B.make_inputs(n, B.row_length(n), device)
    g = torch.Generator(device="cpu").manual_seed(1)
    vocab = model.config.vocab_size
    ids = torch.randint(vocab, x["mask"].shape, generator=g).to(device)
    targets = torch.randint(vocab, x["mask"].shape, generator=g).to(device)
    with torch.no_grad():  # the loss's log-probs: the model's own, so the ratios are the model's
        x["lp"] = token_log_probs(model, ids, targets).float()
        x["old"] = x["lp"] + 0.1 * torch.randn(x["lp"].shape, generator=g).to(device)
    runner.set_inputs(x)
    step = model_step(model, ids, targets, x["mask"])
    step()  # warm
    for c in cases:
        runner.call(c, True)()
    times: dict[str, list[float]] = {"model": [], **{c.key: [] for c in cases}}
    for rep in range(reps):
        times["model"].append(C.timed(step, device))
        for c in cases[rep % len(cases) :] + cases[: rep % len(cases)]:
            runner.call(c, True)()  # untimed: the first calls after a model step run on cold caches
            times[c.key].append(C.timed(runner.call(c, True), device))
    return times


def long_rows(device: str, n: int, times: dict, cases: list[B.Case]) -> list[dict]:
    """The long-format rows of one size from its samples (medians, in ms, and the shares)."""
    med = {k: C.median(v) * 1e3 for k, v in times.items()}

    def row(loss: str, metric: str, value: float, peer: str = "") -> dict:
        return dict(device=device, loss=loss, peer=peer, tokens=n, metric=metric, value=value)

    rows = [row("model", "model_step_ms", med["model"])]
    by_loss = {c.loss: c.key for c in cases}
    for c in cases:
        rows.append(row(c.key, "loss_ms", med[c.key]))
        rows.append(row(c.key, "loss_share_of_step", med[c.key] / (med["model"] + med[c.key])))
        if c.peer in by_loss:
            extra = (med[c.key] - med[by_loss[c.peer]]) / (med["model"] + med[by_loss[c.peer]])
            rows.append(row(c.key, "extra_share_of_step", extra, c.peer))
    return rows


def render(rows: list[dict]) -> str:
    """The markdown table of the rows: per size, the model step and each loss's time and shares."""
    get = {(r["loss"], r["tokens"], r["metric"]): r["value"] for r in rows}
    sizes = sorted({r["tokens"] for r in rows})
    keys = [k for k in CASES if any(r["loss"] == k for r in rows)]
    body = []
    for n in sizes:
        for k in keys:
            extra = get.get((k, n, "extra_share_of_step"))
            body.append(
                [
                    C.fmt_size(n),
                    f"{get[('model', n, 'model_step_ms')]:.1f}",
                    k,
                    f"{get[(k, n, 'loss_ms')]:.3f}",
                    f"{get[(k, n, 'loss_share_of_step')]:.3%}",
                    "" if extra is None else f"{extra:+.3%}",
                ]
            )
    header = ["tokens", "model step ms", "loss", "loss ms", "loss share of the step", "SAT's extra share"]
    return C.md_table(header, body)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-0.6b", choices=sorted(MODELS))
    ap.add_argument("--layers", type=int, default=None, help="the model's depth (default: the architecture's)")
    ap.add_argument("--sizes", default="2K,8K,32K")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--dtype", default=None, choices=("float32", "bfloat16"), help="default: bf16 on CUDA, else fp32")
    ap.add_argument("--stem", default=None, help="result file stem (default bench_loss_share_<device>)")
    args = ap.parse_args(argv)
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    cases = B.selected_cases(",".join(CASES))
    B.init_one_rank_group(device)
    runner = B.Runner(cases, device)
    model = build_model(args.model, args.layers, dtype, device)
    depth = model.config.num_hidden_layers
    env = C.environment(device, model=f"{args.model} ({depth} layers, random weights, {args.dtype or dtype})")
    env["command"] = C.command_line(__file__, argv)
    rows = []
    for size in args.sizes.split(","):
        n = C.parse_size(size)
        rows += long_rows(device.type, n, measure(model, runner, cases, n, args.reps, device), cases)
        print(render([r for r in rows if r["tokens"] == n]), flush=True)
    stem = args.stem or f"bench_loss_share_{device.type}"
    C.write_csv(C.RESULTS / f"{stem}.csv", rows, env)
    C.write_md(
        C.RESULTS / f"{stem}.md",
        "bench_loss_share: the loss call next to the model's step",
        env,
        [
            ("Medians", render(rows)),
        ],
    )
    print(f"wrote {C.RESULTS / stem}.md")


if __name__ == "__main__":
    main()
