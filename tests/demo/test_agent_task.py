"""The agent task (``--task agent``): its episodes, its rollout across weight versions, and its runs."""

import json
import math
from collections import Counter

import pytest
import torch

from sat_ext.demo import cli
from sat_ext.demo.agent_producer import AgentProducer
from sat_ext.demo.engines import EmulatedEngine, Mismatch
from sat_ext.demo.engines.vllm_engine import vllm_available
from sat_ext.demo.losses import default_settings
from sat_ext.demo.methods import Method
from sat_ext.demo.model import build_policy, token_log_probs
from sat_ext.demo.spec import WarmStartSpec
from sat_ext.demo.tasks import make_task, max_positions
from sat_ext.demo.tasks.agent import (
    MAX_OPERANDS,
    MAX_TURNS,
    OBS_LEN,
    RESPONSE_LEN,
    TURN_LEN,
    VOCAB,
    AgentProblem,
    AgentTask,
    operand_counts,
    parse_turn,
)
from sat_ext.demo.train import lag_config, run
from sat_ext.lag import LagController, VersionSpan

from .conftest import flat_spec

EOS, PAD = VOCAB.eos, VOCAB.pad


def turn(text: str) -> list[int]:
    """The ids of a turn written with ``<eos>`` as '$' and ``<pad>`` as '.'."""
    return [EOS if c == "$" else PAD if c == "." else VOCAB.stoi[c] for c in text]


# --------------------------------------------------------------------------- the episode's rules


@pytest.mark.parametrize(
    "text,want",
    [
        ("03+5", ("call", 8)),
        ("90+9", ("call", 99)),
        ("91+9", ("bad", 0)),  # the calculator's running values stay below 100
        ("=08$", ("answer", 8)),
        ("=8$.", ("bad", 0)),
        ("3+5?", ("bad", 0)),
        ("03+$", ("bad", 0)),
        ("$...", ("bad", 0)),
        ("0>+5", ("bad", 0)),
    ],
)
def test_a_turn_is_a_call_an_answer_or_a_format_failure(text, want):
    assert parse_turn(turn(text)) == want


def test_gold_transcripts_replay_to_reward_one_with_one_call_per_operand():
    task = AgentTask()
    problems = task.sample(300, torch.Generator().manual_seed(0))
    assert task.rewards(problems, task.target_ids(problems)).eq(1.0).all()
    for p in problems[:50]:
        ep = task.replay(p, task.target_ids([p])[0])
        assert (ep.calls, ep.format_failures, ep.answered) == (len(p.operands) - 1, 0, True)
        assert len(ep.turns) == len(p.operands)


def test_an_episode_plays_by_the_rules():
    task = AgentTask()
    ep = task.start(AgentProblem((3, 5, 2)))
    assert ep.add_turn(turn("03+5")) == ">08"
    assert ep.add_turn(turn("??+?")) == ">??"  # a format failure: counted, goes on
    assert ep.add_turn(turn("08+2")) == ">10"
    assert ep.add_turn(turn("=11$")) is None  # the wrong answer ends it with nothing
    assert (ep.done, ep.answered, ep.reward, ep.calls, ep.format_failures) == (True, True, 0.0, 2, 1)
    assert task.vocab.decode(ep.response, stop_at_eos=False) == "03+5>08??+?>??08+2>10=11<eos>"
    with pytest.raises(RuntimeError, match="ended"):
        ep.add_turn(turn("=10$"))

    stop = task.start(AgentProblem((1, 2)))
    assert stop.add_turn(turn("01$.")) is None  # <eos> ends the episode whatever the turn holds
    assert (stop.done, stop.answered, stop.reward, stop.format_failures) == (True, False, 0.0, 1)

    loop = task.start(AgentProblem((1, 2)))
    for _ in range(MAX_TURNS - 1):
        assert loop.add_turn(turn("01+0")) == ">01"
    assert loop.add_turn(turn("01+0")) is None  # the last turn gets no observation
    assert (loop.done, loop.answered, len(loop.response)) == (True, False, RESPONSE_LEN)
    with pytest.raises(ValueError, match="4 tokens"):
        task.start(AgentProblem((1, 2))).add_turn(turn("01+"))


def test_a_transcript_whose_observation_is_not_the_tools_is_refused():
    task = AgentTask()
    forged = torch.tensor(task.vocab.encode("01+2>04=04") + [EOS])
    with pytest.raises(ValueError, match="the tool answered '>03'"):
        task.replay(AgentProblem((1, 2)), forged)


def test_operand_counts_are_heavy_tailed_and_seeded():
    ks = operand_counts(20_000, torch.Generator().manual_seed(1)).tolist()
    freq = Counter(ks)
    assert set(freq) == set(range(2, MAX_OPERANDS + 1))
    assert all(freq[k] > freq[k + 1] for k in range(2, MAX_OPERANDS))  # most episodes short, a long tail
    assert freq[MAX_OPERANDS] > 200
    task = make_task("agent")
    a, b = (task.sample(5, torch.Generator().manual_seed(3)) for _ in range(2))
    assert a == b


def test_prompts_and_the_policy_s_positions():
    task = make_task("agent")
    problems = [AgentProblem((4, 0, 9))]
    assert task.vocab.decode(task.prompt_ids(problems)[0]) == "<bos>4+0+9________"
    assert task.prompt_len + task.response_len <= max_positions(task) == 72
    policy = build_policy(seed=0, vocab=task.vocab, max_positions=max_positions(task))
    with torch.no_grad():
        lp = token_log_probs(policy, task.prompt_ids(problems), task.target_ids(problems))
    assert lp.shape == (1, RESPONSE_LEN) and torch.isfinite(lp).all()


# --------------------------------------------------------------------------- the rollout across versions


def _spec(**kw):
    base = dict(
        method=Method("sat"),
        lag=3,
        seed=0,
        setting=default_settings()["sat"],
        backend="core",
        steps=8,
        prompts_per_step=2,
        group_size=3,
        mini_batches=1,
        eval_every=100,
        eval_size=8,
        mode="bounded",
        prefetch=0,
        latency_mean=1.0,
        mismatch=Mismatch(),
        warm=WarmStartSpec(seed=0, task="agent"),
    )
    base.update(kw)
    return flat_spec(**base)


def test_turns_span_versions_and_each_is_scored_by_the_weights_that_generated_it():
    """The real controller in bounded mode, the emulated engine without mismatch, the trainer's updates stood in by
    a weight change per step: every turn's pi^(l) is the log-prob under its own version's weights, its engine
    log-prob equals it bit for bit, observations and padding are out of the mask, and episodes span versions."""
    spec = _spec()
    task = make_task("agent")
    policy = build_policy(seed=0, vocab=task.vocab, max_positions=max_positions(task))
    ctrl = LagController(lag_config(spec))
    producer = AgentProducer(spec, task, EmulatedEngine(policy, spec.engine.mismatch, seed=0), policy, ctrl)
    weights = {0: {k: v.clone() for k, v in policy.state_dict().items()}}
    consumed, now = [], 0
    while len(consumed) < 6 and now < 200:
        producer.tick(now)
        now += 1
        batch = ctrl.take()
        if batch is None:
            continue
        consumed += [(ctrl.version, s) for s in batch]
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(now)))
        assert ctrl.complete_step()
        producer.sync(policy, ctrl.version + 1)
        ctrl.record_sync()
        weights[ctrl.version] = {k: v.clone() for k, v in policy.state_dict().items()}
    assert len(consumed) >= 6
    scorer = build_policy(seed=0, vocab=task.vocab, max_positions=max_positions(task))
    spans = []
    for version, s in consumed:
        g = s.payload
        assert len(g.turns) == spec.recipe.group_size and s.lag <= spec.lag
        for i, turns in enumerate(g.turns):
            ep = task.replay(g.problem, g.responses[i])  # the transcript is the episode's
            assert [t.tokens for t in turns] == [t.generated for t in ep.turns]
            assert int(g.mask[i].sum()) == sum(t.tokens for t in turns)
            for rec, t in zip(ep.turns, turns):
                assert g.mask[i, rec.start : rec.start + rec.generated].all()
                assert not g.mask[i, rec.start + rec.generated : rec.start + TURN_LEN + OBS_LEN].any()  # obs, pad
                ctx = torch.cat([g.prompt[i], g.responses[i, : rec.start]]).unsqueeze(0)
                got = g.checkpoint_log_prob[i, rec.start : rec.start + rec.generated]
                for v in {t.span.oldest, version}:  # its own version, and the trainer's when it is another
                    scorer.load_state_dict(weights[v])
                    with torch.no_grad():
                        lp = token_log_probs(scorer, ctx, g.responses[i, rec.start : rec.start + TURN_LEN].unsqueeze(0))
                    gap = float((got - lp[0, : rec.generated]).abs().max())
                    # scored in another batch shape: equal up to float32 reduction order, not bit for bit
                    assert gap < 1e-5 if v == t.span.oldest else gap > 1e-3, (v, t.span.oldest, gap)
            assert not g.mask[i, len(ep.response) :].any()
            versions = [t.span.oldest for t in turns]
            spans.append(max(versions) - min(versions))
            assert min(versions) == s.span.oldest and max(versions) <= s.span.newest <= version
        versions = [t.span.oldest for turns in g.turns for t in turns]
        assert s.span == VersionSpan(min(versions), max(versions))  # tagged by its first and last turns
        m = g.mask
        assert torch.equal(g.rollout_log_prob[m], g.checkpoint_log_prob[m])  # no mismatch: mu is pi^(l)
    assert max(spans) >= 1  # some episode's turns came from different versions


def test_a_run_logs_per_token_lags_and_tool_counters():
    """train.run on the agent task in bounded mode: every loss token's lag is recorded, batches mix token lags,
    the tool counters are logged, nothing exceeds the bound."""
    warm = build_policy(seed=0, vocab=make_task("agent").vocab, max_positions=72).state_dict()
    res = run(_spec(steps=10, mismatch=Mismatch(engine="bf16")), warm)
    assert len(res.history) == 10
    for h in res.history:
        assert h["lag/token_unrecorded"] == 0 and h["lag/token_lag/max"] <= 3 and h["lag/max"] <= 3
        assert math.isfinite(h["loss"]) and h["agent/turns"] >= 1
        assert sum(v for k, v in h.items() if k.startswith("lag/token_hist/")) == pytest.approx(h["response_len"] * 6)
        assert 0 <= h["agent/format_failures"] <= h["agent/turns"] and 0 <= h["agent/unanswered"] <= 1
    assert max(h["lag/token_lag_spread/max"] for h in res.history) >= 1  # token lags differ inside a batch


@pytest.mark.parametrize("over_bound", ["drop", "regenerate"])
def test_slow_episodes_past_the_bound_are_dropped_or_regenerated_and_counted(over_bound):
    """Bounded mode's other policies on episodes: a group whose slow tool calls push it past max lag 1 is dropped
    or regenerated (counted), never trained on, and its tags stay consistent with its turns."""
    warm = build_policy(seed=0, vocab=make_task("agent").vocab, max_positions=72).state_dict()
    res = run(_spec(lag=1, steps=8, latency_mean=3.0, over_bound=over_bound), warm)
    assert len(res.history) == 8 and max(res.lag_counts) <= 1
    assert res.totals["dropped" if over_bound == "drop" else "regenerated"] > 0
    assert all(h["lag/token_lag/max"] <= 1 and "lag/turn_tag_mismatch" not in h for h in res.history)


def test_an_agent_run_is_deterministic_for_its_seed():
    """Continuous batching draws turns in a fixed order: the same spec and seed give the same run, bit for bit."""
    warm = build_policy(seed=0, vocab=make_task("agent").vocab, max_positions=72).state_dict()
    a, b = (run(_spec(steps=5, mismatch=Mismatch(engine="bf16")), warm) for _ in range(2))
    assert a.history == b.history and a.evals == b.evals and a.lag_counts == b.lag_counts


def test_routing_replay_is_refused_on_the_agent_task():
    with pytest.raises(ValueError, match="R3.*agent"):
        _spec(method=Method("sat", r3=True))


def test_the_cli_runs_the_agent_task(tmp_path):
    """``sat-ext demo --task agent --mode bounded`` end to end at small sizes: a warm start that earns reward,
    then GRPO and SAT-GRPO at max lag 2, the summary naming the reward, every metric finite."""
    out = tmp_path / "out"
    argv = ["--task", "agent", "--mode", "bounded", "--methods", "vanilla,sat", "--lags", "2", "--seeds", "1"]
    argv += ["--steps", "6", "--eval-every", "3", "--eval-size", "32", "--prompts-per-step", "4", "--group-size", "4"]
    argv += ["--sft-max-steps", "150", "--engine", "emulated", "--jobs", "1", "--no-progress", "--no-cache"]
    assert cli.main(argv + ["--out", str(out)]) == 0
    runs = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert {r["loss"] for r in runs} == {"vanilla", "sat"}
    for r in runs:
        assert len(r["history"]) == 6 and all(0.0 <= e <= 1.0 for _, e in r["evals"])
        for h in r["history"]:
            for key in ("loss", "grad_norm", "train_reward", "agent/calls", "lag/token_lag/mean"):
                assert math.isfinite(h[key]), (r["run"], key)
    assert max(e for r in runs for _, e in r["evals"]) > 0  # the warm start plays some episodes to the answer
    assert "sparse terminal" in (out / "summary.md").read_text()


@pytest.mark.skipif(not vllm_available()[0], reason=vllm_available()[1])
def test_the_agent_task_on_the_real_engine(tmp_path):
    """The real vLLM engine serves the turns: contexts of several lengths in one tick, its log-probs close to the
    trainer's, token lags mixed inside a batch at max lag 2."""
    out = tmp_path / "out"
    argv = ["--task", "agent", "--mode", "bounded", "--methods", "vanilla", "--lags", "2", "--seeds", "1"]
    argv += ["--steps", "4", "--sft-max-steps", "150", "--eval-every", "2", "--eval-size", "16", "--engine", "vllm"]
    argv += ["--jobs", "1", "--no-progress", "--no-cache", "--out", str(out)]
    assert cli.main(argv) == 0
    (run_,) = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert len(run_["history"]) == 4
    assert all(0 < h["mismatch/engine"] < 0.05 and h["lag/token_unrecorded"] == 0 for h in run_["history"])
    assert max(h["lag/token_lag/max"] for h in run_["history"]) == 2
