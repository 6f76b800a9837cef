"""benchmarks/bench_loss_share.py end to end on a tiny random Qwen3 (the script's CPU path; its GPU run is not
made here): the model step, every loss through verl's registry, and shares that follow from the medians."""

from __future__ import annotations

import _common as C
import bench_loss_share as S
import pytest
import torch.distributed as dist

TINY = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    max_position_embeddings=64,
    tie_word_embeddings=True,
)


@pytest.fixture
def own_process_group():
    """The script opens a one-rank gloo group in this process; close it so later tests see none."""
    had = dist.is_initialized()
    yield
    if dist.is_initialized() and not had:
        dist.destroy_process_group()


def test_the_share_of_each_loss_in_a_model_step(tmp_path, monkeypatch, own_process_group):
    monkeypatch.setitem(S.MODELS, "tiny", TINY)
    monkeypatch.setattr(C, "RESULTS", tmp_path)
    S.main(["--model", "tiny", "--layers", "1", "--sizes", "64", "--reps", "2", "--device", "cpu", "--stem", "s"])
    rows = C.read_csv(tmp_path / "s.csv")
    get = {(r["loss"], r["metric"]): float(r["value"]) for r in rows}
    assert {r["device"] for r in rows} == {"cpu"} and {r["tokens"] for r in rows} == {"64"}
    step = get[("model", "model_step_ms")]
    assert step > 0
    for key in S.CASES:
        loss = get[(key, "loss_ms")]
        assert get[(key, "loss_share_of_step")] == pytest.approx(loss / (step + loss), rel=1e-4)
    for key, peer in (("sat[micro]", "vanilla"), ("sat_gspo[micro]", "gspo")):
        want = (get[(key, "loss_ms")] - get[(peer, "loss_ms")]) / (step + get[(peer, "loss_ms")])
        assert get[(key, "extra_share_of_step")] == pytest.approx(want, rel=1e-4, abs=1e-5)
        assert [r["peer"] for r in rows if r["loss"] == key and r["metric"] == "extra_share_of_step"] == [peer]
    md = (tmp_path / "s.md").read_text()
    assert "tiny (1 layers, random weights" in md and "| 64 |" in md
