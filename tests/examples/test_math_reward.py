"""The examples' math verifier (sat_ext.examples.math_reward) on math-verify: a table of answer pairs in every form
App. F's verifier must handle, each scored right one way and wrong the other, adversarial responses with no
exception and a bounded time, and the thread / process behaviour verl and OpenRLHF call it with.

Cost: ~15 s on a 2-core machine (worker start-up ~0.6 s each; two answers stopped at a 1 s limit).
"""

from __future__ import annotations

import importlib.util
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("math_verify")

from sat_ext.examples import math_reward as mr  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LIMIT_S = 1.0  # the adversarial tests' time limit (the default is mr.TIME_LIMIT_S)

# (response, reference, a wrong reference): the response equals the first and not the second.
PAIRS = [
    # integers (AIME / DAPO), plain and in LaTeX, with formatting around them
    ("so the total is 210.\nAnswer: 210", "210", "211"),
    ("Answer: $1,000$", "1000", "100"),
    ("Answer: **42**", "42", "24"),
    ("Answer: 45^\\circ", "45", "90"),
    ("Answer: 3 \\text{ cm}", "3", "4"),
    ("Answer: 2^{10}", "1024", "1023"),
    # fractions vs decimals, both ways
    ("Answer: $\\frac{1}{2}$", "0.5", "0.25"),
    ("Answer: 0.5", "\\frac{1}{2}", "\\frac{1}{3}"),
    ("Answer: 1/2", "\\dfrac{1}{2}", "2"),
    ("Answer: \\dfrac{3}{4}", "3/4", "4/3"),
    ("Answer: -\\frac{1}{3}", "-1/3", "1/3"),
    ("Answer: 0.75", "3/4", "0.7"),
    # x = 3 vs 3, both ways
    ("Answer: x = 3", "3", "4"),
    ("so \\boxed{x=3}", "3", "-3"),
    ("Answer: 3", "x=3", "x=4"),
    # intervals
    ("Answer: [1, 2)", "[1,2)", "[1,2]"),
    ("Answer: (1,2]", "(1, 2]", "(1,2)"),
    ("Answer: (-\\infty, 0)", "(-\\infty,0)", "(-\\infty,0]"),
    ("Answer: $x \\in [2, 5]$", "[2,5]", "[2,6]"),
    # radicals, both ways
    ("Answer: \\sqrt{8}", "2\\sqrt{2}", "\\sqrt{2}"),
    ("Answer: 2\\sqrt{2}", "\\sqrt{8}", "\\sqrt{6}"),
    ("The final answer is $\\boxed{\\frac{\\sqrt{3}}{2}}$.", "\\frac{\\sqrt3}2", "\\frac{\\sqrt2}2"),
    # LaTeX vs plain
    ("Answer: \\frac{\\pi}{4}", "\\pi/4", "\\pi/2"),
    ("Answer: sqrt(2)/2", "\\frac{\\sqrt{2}}{2}", "\\frac{\\sqrt{3}}{2}"),
    ("Answer: 2^(1/2)", "\\sqrt2", "\\sqrt3"),
    ("Answer: \\{1,2,3\\}", "1,2,3", "1,2,4"),
    ("Answer: 10\\%", "10", "20"),
    # which answer is the final one
    ("Answer: 7\n... wait, recheck.\nAnswer: 9<|endoftext|>", "9", "7"),
    ("\\boxed{4} wait, no. Answer: 5", "5", "4"),
    ("Answer: 4\n\nso \\boxed{5}", "5", "4"),
    ("The answer is $\\boxed{1{,}000}$ hmm \\boxed{63}<|im_end|>", "63", "1000"),
    ("x" * 5000 + "\nAnswer: 4", "4", "5"),
]


@pytest.fixture(scope="module")
def pool():
    p = mr.VerifierPool(2, limit_s=LIMIT_S)
    yield p
    p.close()


def _score(pool, response: str, *answers: str) -> str:
    return pool.verdict(mr.response_tail(response), answers)


@pytest.mark.parametrize("response,right,wrong", PAIRS)
def test_pair_table_both_ways(pool, response, right, wrong):
    assert _score(pool, response, right) == mr.RIGHT
    assert _score(pool, response, wrong) == mr.WRONG


def test_entry_points_score_one_and_zero():
    assert mr.compute_score("aime2024", "Answer: \\frac{1}{2}", "0.5") == 1.0
    assert mr.compute_score("math_dapo", "Answer: 0.5", "\\frac{1}{3}", extra_info={"index": "7"}) == 0.0
    # a row's other accepted answers: a list ground truth, or extra_info["answers"] (the data script's)
    assert mr.compute_score("math_dapo", "Answer: 4", ["3", "4"]) == 1.0
    assert mr.compute_score("math_dapo", "Answer: 4", "3", extra_info={"answers": ["3", "4"]}) == 1.0
    assert mr.compute_score("math_dapo", None, "3") == 0.0  # no response: wrong, not an error


@pytest.mark.parametrize("ground_truth", [None, "", "  ", [], [""]])
def test_a_reference_without_an_answer_is_a_named_error(ground_truth):
    with pytest.raises(ValueError, match="holds no answer"):
        mr.compute_score("math_dapo", "Answer: 4", ground_truth)


def test_no_answer_in_the_response_is_wrong(pool):
    assert _score(pool, "I could not solve it.", "4") == mr.WRONG
    assert _score(pool, "Answer: 4" + "x" * 5000, "4") == mr.WRONG  # beyond the last TAIL_CHARS characters


ADVERSARIAL = {
    "huge": "7" * 10_000_000 + " and so on",
    "huge_latex": "$" + "\\frac{1}{2}+" * 500_000 + "1$",
    "nested_boxed": "Answer: " + "\\boxed{" * 400 + "1" + "}" * 400,
    "nested_frac": "Answer: $" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "$",
    "unbalanced_open": "Answer: \\frac{{{{{1}{2" + "{" * 1500,
    "unbalanced_close": "\\boxed{" + "}" * 1500 + "Answer: }}}{",
    "dollars": "$" * 3000,
    "binary": "\x00\xff\ud800\u202e" * 500,
    "empty": "",
    "tower": "Answer: 10^{10^{10^{10}}}",
    "factorial": "Answer: (10^{100})!",
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_response_scores_without_exception_in_bounded_time(pool, name):
    start = time.monotonic()
    verdict = _score(pool, ADVERSARIAL[name], "5")
    elapsed = time.monotonic() - start
    assert verdict in (mr.WRONG, mr.TIMEOUT, mr.ERROR)
    assert elapsed < LIMIT_S + mr.KILL_GRACE_S + 1.5  # + a worker start-up


def test_a_worker_that_overruns_is_killed_and_replaced(pool):
    """The hard bound: no reply within the wait -> the process is killed (here the worker's own timer is set
    far beyond the wait, as for SymPy stuck in C code)."""
    worker = mr._Worker()
    start = time.monotonic()
    assert worker.ask([ADVERSARIAL["tower"], ["5"], 60.0], wait_s=0.5) is None
    worker.kill()
    assert time.monotonic() - start < 5 and worker.process.poll() is not None
    assert _score(pool, "Answer: 5", "5") == mr.RIGHT  # the pool still answers


def test_threads_like_verl_and_openrlhf_call_it():
    """verl runs compute_score in an executor thread, OpenRLHF reward_func through asyncio.to_thread; math-verify's
    own signal timeout cannot run there (it raises), the worker processes can."""
    from math_verify import parse

    errors = []

    def naive():
        try:
            parse("$\\frac{1}{2}$")  # math-verify's default 5 s signal.alarm timeout
        except ValueError as e:
            errors.append(e)

    t = threading.Thread(target=naive)
    t.start()
    t.join()
    assert errors and "threaded environment" in str(errors[0])
    with ThreadPoolExecutor(8) as ex:
        scores = list(
            ex.map(lambda i: mr.compute_score("math_dapo", f"Answer: \\frac{{{i}}}{{2}}", str(i / 2)), range(40))
        )
    assert scores == [1.0] * 40


def test_the_openrlhf_file_is_the_same_verifier():
    path = REPO / "examples" / "openrlhf_aime_qwen3_30b" / "math_reward.py"
    spec = importlib.util.spec_from_file_location("reward_func", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # as OpenRLHF's SingleTurnAgentExecutor loads it
    assert module.reward_func is mr.reward_func
    prompt = "<|im_start|>user\nSolve ...<|im_end|>\n<|im_start|>assistant\n"
    one = module.reward_func([prompt + "so\nAnswer: \\frac{1}{2}<|im_end|>"], [prompt], ["0.5"])
    assert one == {"rewards": 1.0, "scores": 1.0, "extra_logs": {"acc": 1.0}}
    many = module.reward_func([prompt + "Answer: 3", prompt + "Answer: 4"], [prompt] * 2, [["4", "3"], "5"])
    assert many["rewards"] == [1.0, 0.0]


def test_stronger_than_verls_math_dapo_on_non_integer_answers():
    """What issue #23 names: math_dapo (the examples' earlier reward) compares normalised strings, so right answers
    in another form score wrong; this verifier scores them right and still rejects the wrong ones."""
    math_dapo = pytest.importorskip("verl.utils.reward_score.math_dapo")
    forms = [
        ("Answer: \\frac{1}{2}", "0.5"),
        ("Answer: 0.5", "\\frac{1}{2}"),
        ("Answer: 2\\sqrt{2}", "\\sqrt{8}"),
        ("Answer: \\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}2"),
        ("Answer: 0.75", "3/4"),
    ]
    for response, gold in forms:
        assert not math_dapo.compute_score(response, gold)["acc"], response
        assert mr.compute_score("math_dapo", response, gold) == 1.0, response


def test_worker_count_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(mr.WORKERS_ENV, "3")
    assert mr._workers_from_env() == 3
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv(mr.WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=mr.WORKERS_ENV):
            mr._workers_from_env()
    with pytest.raises(ValueError, match="size"):
        mr.VerifierPool(0)
