"""The program task: its language's parser and evaluator (agreement with Python, every safety limit), the seeded
generator, the held-out split and the partial-credit reward."""

import json
import math
import random
import time

import pytest
import torch

from sat_ext.demo import cli
from sat_ext.demo.engines.vllm_engine import vllm_available
from sat_ext.demo.model import build_policy
from sat_ext.demo.tasks import TASKS, eval_sampler, make_task, max_positions
from sat_ext.demo.tasks.expr import ExprError
from sat_ext.demo.tasks.prog import TOKENS, Cond, Name, ProgLimits, Sum, evaluate, parse, run_program, to_python
from sat_ext.demo.tasks.program import (
    CONDITIONS,
    HELD_OUT_MOD,
    N_TESTS,
    PROBES,
    PROGRAM_VOCAB,
    ProgramProblem,
    ProgramTask,
    format_output,
    is_held_out,
    partial_credit,
)
from sat_ext.demo.warm import eval_problems


def toks(text: str) -> list[str]:
    """Tokens of a program written with spaces, numbers split into digit tokens: ``"x * 12"`` ->
    ``['x', '*', '1', '2']``."""
    out: list[str] = []
    for word in text.split():
        out += list(word) if word.isdigit() else [word]
    return out


def ids(text: str) -> list[int]:
    """Response ids of a program text ('$' = <eos>, '_' = <pad>, each a word of its own)."""
    special = {"$": PROGRAM_VOCAB.eos, "_": PROGRAM_VOCAB.pad, "<bos>": PROGRAM_VOCAB.bos}
    out: list[int] = []
    for word in text.split():
        out += [special[word]] if word in special else PROGRAM_VOCAB.encode(toks(word))
    return out


def python_value(tokens, xyz) -> int:
    """What Python says (test only, on programs our parser accepted: no name but x, y, z, i, sum, range)."""
    x, y, z = xyz  # globals, not locals: a generator expression sees only eval's globals
    return eval(to_python(tokens), {"__builtins__": {}, "sum": sum, "range": range, "x": x, "y": y, "z": z})


# --------------------------------------------------------------------------- the language


@pytest.mark.parametrize(
    "text,xyz,want",
    [
        ("x * 3 + 7 if x < y else y * 2 - 1", (1, 2, 0), 10),
        ("x * 3 + 7 if x < y else y * 2 - 1", (2, 2, 0), 3),  # a tie takes the else arm, as in Python
        ("x if x > y else y", (3, 5, 0), 5),
        ("sum ( i * 2 + 1 for i in range ( z ) )", (0, 0, 4), 16),
        ("sum ( i for i in range ( x - 5 ) )", (2, 0, 0), 0),  # a negative range is empty
        ("sum ( sum ( i for i in range ( i ) ) for i in range ( 4 ) )", (0, 0, 0), 4),  # inner range reads outer i
        ("1 if x < 1 else 2 if x < 2 else 3", (1, 0, 0), 2),  # the else arm may be another conditional
        ("( x + 1 ) * - 2 - - y", (3, 4, 0), -4),
        ("x - 3 - 2", (10, 0, 0), 5),  # left-associative
        ("105 - 0", (0, 0, 0), 105),
    ],
)
def test_programs_evaluate_as_python_does(text, xyz, want):
    tokens = toks(text)
    assert evaluate(parse(tokens), xyz) == want == python_value(tokens, xyz)


def test_parse_tree_of_a_conditional_with_a_loop():
    tree = parse(toks("sum ( i * 2 for i in range ( x ) ) if x < y else y"))
    assert isinstance(tree, Cond) and tree.op == "<" and tree.left == Name("x") and tree.other == Name("y")
    assert isinstance(tree.then, Sum) and tree.then.count == Name("x")


def test_generated_and_mutated_programs_agree_with_python():
    """Every program the parser accepts (the generator's, and random one-token edits of them) has Python's value
    wherever our evaluator returns one."""
    task = ProgramTask()
    rng = random.Random(0)
    checked = 0
    for p in task.sample(150, torch.Generator().manual_seed(3)):
        variants = [list(p.program)]
        for _ in range(20):
            t = list(p.program)
            j = rng.randrange(len(t))
            edit = rng.randrange(3)
            if edit == 0:
                t[j] = rng.choice(TOKENS)
            elif edit == 1:
                del t[j]
            else:
                t.insert(j, rng.choice(TOKENS))
            variants.append(t)
        for t in variants:
            try:
                outs = run_program(t, p.tests)
            except ExprError:
                continue
            for xyz, o in zip(p.tests, outs):
                if o is not None:
                    assert o == python_value(t, xyz), to_python(t)
                    checked += 1
    assert checked > 1500


@pytest.mark.parametrize(
    "text,msg",
    [
        ("", "empty program"),
        ("x *", "expected a number"),
        ("x y", "unexpected 'y'"),
        ("( x + 1", "expected '\\)'"),
        ("x )", "unexpected '\\)'"),
        ("1234", "more than 3 digits"),
        ("0 7", "leading zero"),  # Python refuses 07 too
        ("i + 1", "'i' outside a sum"),
        ("sum ( 1 for i in range ( i ) )", "'i' outside a sum"),  # the range is evaluated outside the loop
        ("sum ( x for y in range ( 3 ) )", "expected 'i'"),
        ("x < y", "unexpected '<'"),
        ("x if x < y < z else y", "expected 'else'"),  # no chained comparisons
        ("x if x else y", "expected '<' or '>'"),
    ],
)
def test_malformed_programs_are_refused(text, msg):
    with pytest.raises(ExprError, match=msg):
        run_program(toks(text), [(1, 2, 3)])


@pytest.mark.parametrize("bad", ["=", ",", "__import__", "os", "**", "lambda", "x.y"])
def test_tokens_outside_the_language_are_refused(bad):
    with pytest.raises(ExprError, match="not in the language"):
        parse(["x", "+", bad])


def test_size_limits_tokens_nodes_depth():
    with pytest.raises(ExprError, match="longer than 48"):
        parse(toks("x + " * 24 + "x"))
    assert evaluate(parse(toks("x + x + x")), (1, 0, 0), ProgLimits(max_nodes=5)) == 3  # 3 names + 2 operators
    with pytest.raises(ExprError, match="more than 4 nodes"):
        parse(toks("x + x + x"), ProgLimits(max_nodes=4))
    roomy = ProgLimits(max_tokens=200, max_nodes=200)  # so that depth is the limit these programs break
    parse(toks("( " * 8 + "x" + " )" * 8))
    parse(toks("x" + " if x < y else x" * 8), roomy)
    for deep in (
        "( " * 9 + "x" + " )" * 9,
        "- " * 9 + "x",
        "sum ( " * 9 + "x" + " for i in range ( 2 ) )" * 9,
        "x" + " if x < y else x" * 9,
    ):
        with pytest.raises(ExprError, match="nests deeper than 8"):
            parse(toks(deep), roomy)


def test_evaluation_limits_steps_range_and_magnitude():
    assert evaluate(parse(toks("sum ( 1 for i in range ( 16 ) )")), (0, 0, 0)) == 16
    with pytest.raises(ExprError, match="range\\(17\\) is longer than 16"):
        evaluate(parse(toks("sum ( 1 for i in range ( 17 ) )")), (0, 0, 0))
    cube = "sum ( sum ( sum ( 1 for i in range ( 16 ) ) for i in range ( 16 ) ) for i in range ( 16 ) )"
    with pytest.raises(ExprError, match="exceeds 2000 steps"):  # 16^3 iterations: refused, not run
        evaluate(parse(toks(cube)), (0, 0, 0))
    assert evaluate(parse(toks("x + x")), (1, 0, 0), ProgLimits(max_steps=3)) == 2  # one step per node visit
    with pytest.raises(ExprError, match="exceeds 2 steps"):
        evaluate(parse(toks("x + x")), (1, 0, 0), ProgLimits(max_steps=2))
    with pytest.raises(ExprError, match="magnitude"):
        evaluate(parse(toks("999 * 999 * 999")), (0, 0, 0))
    with pytest.raises(ExprError, match="magnitude"):
        evaluate(parse(toks("sum ( 999 * 999 for i in range ( 16 ) )")), (0, 0, 0))  # the running total too
    # One input past a limit fails that test only.
    assert run_program(toks("sum ( 1 for i in range ( x * 2 ) )"), [(8, 0, 0), (9, 0, 0)]) == [16, None]


def test_the_worst_programs_under_the_limits_run_fast():
    """Deeply nested loops of the longest range and huge products are cut off by the limits within milliseconds."""
    worst = [
        toks("sum ( " * 4 + "1" + " for i in range ( 16 ) )" * 4),  # 16^4 iterations
        toks("sum ( " * 3 + "i * i * i * i * i * i * i" + " for i in range ( 16 ) )" * 3),
        toks("999 * 999 * 999 * 999 * 999 * 999 * 999 * 999"),
    ]
    t0 = time.perf_counter()
    for tokens in worst:
        assert len(tokens) <= 48
        with pytest.raises(ExprError):
            evaluate(parse(tokens), (9, 9, 9))
    assert time.perf_counter() - t0 < 0.5


# --------------------------------------------------------------------------- the task and its generator


def test_problems_prompts_and_targets():
    task = make_task("program")
    assert "program" in TASKS and isinstance(task, ProgramTask)
    assert (task.prompt_len, task.response_len, max_positions(task)) == (32, 26, 64)
    assert PROGRAM_VOCAB.size == len(TOKENS) + 2 + 3
    probs = task.sample(300, torch.Generator().manual_seed(0))
    p = task.prompt_ids(probs)
    assert p.shape == (300, 32) and (p[:, 0] == PROGRAM_VOCAB.bos).all()
    t = task.target_ids(probs)
    assert t.shape == (300, 26)
    assert all(task.reward(q, row) == 1.0 for q, row in zip(probs, t))  # every generated program passes its tests
    for q in probs:
        assert list(q.examples) == run_program(q.program, PROBES)
        assert len(set(q.tests)) == N_TESTS and not set(q.tests) & set(PROBES)
        assert list(q.expected) == run_program(q.program, q.tests)
        at = q.program.index("if")
        iu, iv = "xyz".index(q.program[at + 1]), "xyz".index(q.program[at + 3])
        assert sum(t[iu] < t[iv] for t in q.tests) == N_TESTS // 2  # both arms are tested
    assert {len(q.program) for q in probs} == {15, 25}  # tens of tokens: two affine arms, or one a loop
    assert {q.program[0] for q in probs} == {"x", "y", "sum"}
    assert {tuple(q.program[q.program.index("if") + 1 : q.program.index("else")]) for q in probs} == {
        (u, "<", v) for u, v in CONDITIONS
    }
    assert {"z"} <= {tok for q in probs for tok in q.program}  # three inputs
    loop_sides = {q.program.index("sum") < q.program.index("if") for q in probs if "sum" in q.program}
    assert loop_sides == {True, False}


def test_prompt_format():
    q = ProgramProblem(tuple(toks("x * 3 + 7 if x < y else y * 2 - 9")), (10, -5, 13, 3), (), ())
    assert PROGRAM_VOCAB.decode(PROGRAM_VOCAB.encode(q.prompt)) == "122=010,212=-05,223=013,231=003"
    assert [format_output(v) for v in (0, 7, 405, -4, -99)] == ["000", "007", "405", "-04", "-99"]
    with pytest.raises(ValueError):
        format_output(-100)
    assert q.text == "x * 3 + 7 if x < y else y * 2 - 9"


def test_generator_is_deterministic_by_seed():
    task = ProgramTask()
    a = task.sample(64, torch.Generator().manual_seed(5))
    assert a == task.sample(64, torch.Generator().manual_seed(5))
    assert a != task.sample(64, torch.Generator().manual_seed(6))
    g = torch.Generator().manual_seed(5)
    assert task.sample(20, g) + task.sample(44, g) == a  # a stream: n then m problems are the first n + m
    held = task.sample_eval(32, torch.Generator().manual_seed(5))
    assert held == task.sample_eval(32, torch.Generator().manual_seed(5))
    assert held[:8] == task.sample_eval(8, torch.Generator().manual_seed(5))


def test_held_out_split_is_disjoint_from_training():
    task = ProgramTask()
    train = task.sample(4000, torch.Generator().manual_seed(0))
    held = task.sample_eval(256, torch.Generator().manual_seed(2607))
    assert not any(is_held_out(q.program) for q in train)
    assert all(is_held_out(q.program) for q in held)
    assert not {q.program for q in train} & {q.program for q in held}
    assert len({q.program for q in held}) > 250
    # The split is 1 in HELD_OUT_MOD programs, and the evaluation the runs use is the held-out stream.
    g = torch.Generator().manual_seed(1)
    drawn = [task._candidate(g)[0] for _ in range(4000)]
    assert abs(sum(map(is_held_out, drawn)) / len(drawn) - 1 / HELD_OUT_MOD) < 0.03
    assert eval_problems(task, 16)[1] == held[:16]
    code = make_task("code")
    assert eval_sampler(code) == code.sample  # the other tasks: their one stream, as before


# --------------------------------------------------------------------------- the reward


@pytest.fixture(scope="module")
def problem() -> ProgramProblem:
    program = tuple(toks("x * 3 + 7 if x < y else sum ( i * 2 + 1 for i in range ( y ) )"))
    tests = ((0, 5, 1), (1, 2, 3), (2, 9, 0), (3, 5, 4), (5, 5, 5), (7, 2, 0), (4, 3, 9), (9, 0, 2))
    return ProgramProblem(program, tuple(run_program(program, PROBES)), tests, tuple(run_program(program, tests)))


def test_partial_credit_is_the_fraction_of_hidden_tests_passed(problem):
    task = ProgramTask()
    r = lambda text: task.reward(problem, ids(text))  # noqa: E731
    assert r("x * 3 + 7 if x < y else sum ( i * 2 + 1 for i in range ( y ) ) $") == 1.0
    assert r("3 * x + 7 if y > x else y * y $") == 1.0  # any equivalent program: sum(2i+1, i<y) = y^2
    assert r("x * 3 + 7 if x < y else 0 $") == 4 / 8 + 1 / 8  # the right then-arm; 'else 0' also fits y = 0
    assert r("x * 3 + 7 $") == 4 / 8  # the then-arm alone passes the four tests where x < y
    assert r("x * 3 + 8 if x < y else y * y $") == 4 / 8  # a wrong constant costs that arm's tests
    assert r("x * 3 + 7 if x < z else y * y $") == 4 / 8 + 1 / 8 + 1 / 8  # a wrong condition: where it agrees
    assert r("x * 3 + 7 if x < y else y * y $ x x _") == 1.0  # nothing after <eos> counts
    for bad in (
        "x * 3 + 7 if x < y else y * y",  # no <eos>
        "x * 3 + 7 if x < y else y * y = $",  # a prompt token
        "<bos> x * 3 + 7 if x < y else y * y $",  # a special token
        "x * 3 + 7 if x < y else $",  # does not parse
        "$",  # empty
    ):
        assert r(bad) == 0.0, bad
    # A limit broken on some inputs fails those tests only: range(4 * y) exceeds 16 for y = 5.
    assert r("x * 3 + 7 if x < y else sum ( 1 for i in range ( y * 4 ) ) - y * 4 + y * y $") == 4 / 8 + 3 / 8
    assert partial_credit(None, problem) == 0.0
    rows = torch.tensor([ids("x * 3 + 7 $ " + "_ " * 20), ids("y * y $ " + "_ " * 22)])
    assert task.rewards([problem, problem], rows).tolist() == [0.5, 0.5]


def test_policy_for_the_program_task_has_the_positions_it_needs():
    task = ProgramTask()
    policy = build_policy(seed=0, vocab=task.vocab, max_positions=max_positions(task))
    assert policy.config.max_position_embeddings == 64 and policy.config.vocab_size == PROGRAM_VOCAB.size
    with torch.no_grad():
        prompts = task.prompt_ids(task.sample(2, torch.Generator().manual_seed(0)))
        logits = policy(input_ids=torch.cat([prompts, task.target_ids(task.sample(2, torch.Generator()))], 1)).logits
    assert logits.shape == (2, 58, PROGRAM_VOCAB.size) and torch.isfinite(logits).all()
    # The other tasks keep the 32 positions (and so their vLLM max_model_len) they had.
    assert max_positions(make_task("code")) == max_positions(make_task("addition")) == 32


# --------------------------------------------------------------------------- through the real CLI


def _history(out):
    return [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]


def test_quick_smoke_run_on_the_program_task(tmp_path):
    """``sat-ext demo --quick --task program`` at small sizes: a warm start that earns some partial credit, then 12
    RL steps of GRPO, SAT-GRPO and SAT-GSPO w/ R3 at lags 1 and 8, every metric finite."""
    out = tmp_path / "out"
    argv = ["--quick", "--task", "program", "--steps", "12", "--sft-target", "0.02", "--sft-max-steps", "300"]
    argv += ["--eval-every", "6", "--eval-size", "32", "--prompts-per-step", "4", "--group-size", "4"]
    argv += ["--engine", "emulated", "--jobs", "1", "--no-progress", "--out", str(out), "--no-cache"]
    assert cli.main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "program"
    runs = _history(out)
    assert len(runs) == 6 and {(r["loss"], r["lag"]) for r in runs} >= {("sat", 1), ("sat", 8)}
    for r in runs:
        assert len(r["history"]) == 12
        for h in r["history"]:
            for key in ("loss", "grad_norm", "mismatch/d_pi", "train_reward", "abs_log_ratio/p90"):
                assert math.isfinite(h[key]), (r["run"], key)
            assert 0.0 <= h["train_reward"] <= 1.0
        assert all(0.0 <= e <= 1.0 for _, e in r["evals"])
    rewards = [h["train_reward"] for r in runs for h in r["history"]]
    assert any(0 < x < 1 for x in rewards)  # partial credit: neither all wrong nor all right
    assert any(h["grad_norm"] > 0 for r in runs for h in r["history"])  # the groups' rewards differ: RL moves
    assert "fraction of hidden tests passed" in (out / "summary.md").read_text()


@pytest.mark.skipif(not vllm_available()[0], reason=vllm_available()[1])
def test_program_task_on_the_real_engine(tmp_path):
    """The real vLLM engine serves the 64-position policy; 16 prompts x 8 at lag 2 put more prompt tokens in one
    engine step than vLLM's default budget (which made vLLM 0.31 split a prompt and crash), and the engine's
    log-probs stay close to the trainer's."""
    out = tmp_path / "out"
    argv = ["--task", "program", "--methods", "vanilla", "--lags", "2", "--seeds", "1", "--steps", "3"]
    argv += ["--sft-max-steps", "25", "--eval-every", "3", "--eval-size", "16", "--engine", "vllm", "--jobs", "1"]
    argv += ["--no-progress", "--no-cache", "--out", str(out)]
    assert cli.main(argv) == 0
    (run,) = _history(out)
    assert len(run["history"]) == 3
    assert all(0 < h["mismatch/engine"] < 0.05 for h in run["history"])
