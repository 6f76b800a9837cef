"""The code task: the expression language's interpreter (no eval, bounded) and the hidden-test reward."""

import pytest
import torch

from sat_ext.demo.tasks import make_task
from sat_ext.demo.tasks.code import CODE_VOCAB, HIDDEN_XS, CodeTask, FunctionProblem, hidden_test_reward
from sat_ext.demo.tasks.expr import BinOp, ExprError, Limits, Num, Var, evaluate, parse, run_program


def ids(text: str) -> list[int]:
    """Response ids from text where '$' stands for <eos> and '_' for <pad>."""
    return [CODE_VOCAB.eos if c == "$" else CODE_VOCAB.pad if c == "_" else CODE_VOCAB.stoi[c] for c in text]


@pytest.mark.parametrize(
    "text,xs,want",
    [
        ("2*x+1", (0, 1, 5), [1, 3, 11]),
        ("x+x+1", (0, 1, 5), [1, 3, 11]),
        ("1+2*x", (2,), [5]),
        ("(x+3)*2", (1,), [8]),
        ("x-3-2", (10,), [5]),  # left-associative
        ("2*3+4*x", (1,), [10]),  # * binds tighter than +
        ("-x*-2", (4,), [8]),
        ("--7", (0,), [7]),
        ("007", (0,), [7]),
        ("((x))", (9,), [9]),
    ],
)
def test_programs_evaluate_with_integer_arithmetic(text, xs, want):
    assert run_program(text, xs) == want


def test_parse_tree():
    assert parse("2*x+1") == BinOp("+", BinOp("*", Num(2), Var()), Num(1))


@pytest.mark.parametrize(
    "text,msg",
    [
        ("", "empty program"),
        ("2*", "expected a number"),
        ("2x", "unexpected 'x'"),
        ("(x+1", "missing '\\)'"),
        ("x)", "unexpected '\\)'"),
        ("1234", "more than 3 digits"),
        ("x,1", "unexpected ','"),
        ("x=1", "unexpected '='"),
        ("__import__('os')", "expected a number"),  # no names but x, no calls: nothing reaches Python
        ("x+" * 20 + "x", "longer than 32"),
    ],
)
def test_malformed_programs_are_refused(text, msg):
    with pytest.raises(ExprError, match=msg):
        run_program(text, (1,))


def test_limits_on_depth_nodes_steps_and_magnitude():
    with pytest.raises(ExprError, match="nests deeper"):
        parse("(" * 9 + "x" + ")" * 9)
    parse("(" * 8 + "x" + ")" * 8)
    with pytest.raises(ExprError, match="nests deeper"):
        parse("-" * 9 + "x")
    assert run_program("x+x+x", (1,), Limits(max_nodes=5)) == [3]  # 3 leaves + 2 operators
    with pytest.raises(ExprError, match="more than 4 nodes"):
        parse("x+x+x", Limits(max_nodes=4))
    assert evaluate(parse("x+x"), 1, Limits(max_steps=3)) == 2  # one step per node
    with pytest.raises(ExprError, match="exceeds 2 steps"):
        evaluate(parse("x+x"), 1, Limits(max_steps=2))
    with pytest.raises(ExprError, match="exceeds 1000 in magnitude"):
        run_program("999*999", (0,), Limits(max_abs=1000))
    assert run_program("999*999", (0,)) == [998001]
    with pytest.raises(ExprError, match="magnitude"):
        run_program("999*999*999", (0,))  # 10^9 > the default 10^6


def test_problems_prompts_and_canonical_programs():
    task = make_task("code")
    assert isinstance(task, CodeTask) and task.prompt_len == 7 and task.response_len == 8
    probs = task.sample(400, torch.Generator().manual_seed(0))
    assert probs == task.sample(400, torch.Generator().manual_seed(0))
    assert {p.a for p in probs} == set(range(10)) and max(p.b for p in probs) <= 49
    p = task.prompt_ids(probs)
    assert p.shape == (400, 7) and (p[:, 0] == CODE_VOCAB.bos).all()
    assert FunctionProblem(3, 7).prompt == "07,10="
    assert [FunctionProblem(a, b).answer for a, b in [(3, 7), (1, 7), (0, 7), (3, 0), (1, 0), (0, 0)]] == [
        "3*x+7",
        "x+7",
        "7",
        "3*x",
        "x",
        "0",
    ]
    t = task.target_ids(probs)
    assert t.shape == (400, 8)
    assert all(task.reward(q, row) == 1.0 for q, row in zip(probs, t))  # every canonical program passes
    assert {len(q.answer) for q in probs} >= {1, 3, 5, 6}


def test_reward_is_all_hidden_tests_and_any_correct_program_earns_it():
    f = FunctionProblem(3, 7)
    for good in ("3*x+7$", "x+x+x+7$", "7+3*x$", "(x+2)*3+1$"):
        assert hidden_test_reward(ids(good), f) == 1.0, good
    assert hidden_test_reward(ids("3*x+7$x_"), f) == 1.0  # after <eos> nothing counts
    for bad in ("3*x+8$", "3*x+7", "3*x+7___", "$", "3*x,7$", "3*x+7=$", "x*x+7$"):
        assert hidden_test_reward(ids(bad), f) == 0.0, bad
    assert hidden_test_reward([CODE_VOCAB.bos, *ids("3*x+7$")], f) == 0.0
    # Hidden inputs, not the shown ones: a program that only fits f(0) and f(1) fails.
    assert 0 not in HIDDEN_XS and 1 not in HIDDEN_XS
    assert hidden_test_reward(ids("x*x*3+7$"), f) == 0.0  # equals f at x = 0 and 1 only
    task = CodeTask()
    assert task.rewards([f, FunctionProblem(0, 5)], torch.tensor([ids("3*x+7$__"), ids("4$______")])).tolist() == [
        1.0,
        0.0,
    ]


def test_unknown_task():
    with pytest.raises(ValueError, match="task must be one of"):
        make_task("chess")
