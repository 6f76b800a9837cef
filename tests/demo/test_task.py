import torch

from sat_ext.demo.tasks.addition import VOCAB, AdditionTask, Problem, exact_match_reward, response_mask


def ids(text: str) -> list[int]:
    """Response ids from text where '$' stands for <eos> and '_' for <pad>."""
    out = []
    for c in text:
        out.append(VOCAB.eos if c == "$" else VOCAB.pad if c == "_" else VOCAB.stoi[c])
    return out


def test_prompt_format_and_lengths():
    task = AdditionTask()
    probs = task.sample(50, torch.Generator().manual_seed(0))
    p = task.prompt_ids(probs)
    assert p.shape == (50, task.prompt_len) == (50, 7)
    assert (p[:, 0] == VOCAB.bos).all()
    for prob, row in zip(probs, p):
        text = VOCAB.decode(row[1:])
        assert text == prob.prompt
        assert len(text) == 6 and text[2] == "+" and text[5] == "="
        assert int(text[:2]) == prob.a and int(text[3:5]) == prob.b
    assert Problem(7, 58).prompt == "07+58="


def test_answers_are_correct_and_targets_end_in_eos():
    task = AdditionTask()
    probs = task.sample(500, torch.Generator().manual_seed(1))
    t = task.target_ids(probs)
    assert t.shape == (500, task.response_len)
    for prob, row in zip(probs, t):
        assert prob.answer == str(prob.a + prob.b)
        assert VOCAB.decode(row) == prob.answer + "<eos>"
        assert task.reward(prob, row) == 1.0  # the target itself is rewarded
    assert all(0 <= p.a < 100 and 0 <= p.b < 100 for p in probs)
    assert {len(p.answer) for p in probs} >= {2, 3}


def test_generator_is_deterministic_by_seed():
    task = AdditionTask()
    a = task.sample(64, torch.Generator().manual_seed(5))
    b = task.sample(64, torch.Generator().manual_seed(5))
    c = task.sample(64, torch.Generator().manual_seed(6))
    assert a == b
    assert a != c
    small = AdditionTask(max_operand=10).sample(200, torch.Generator().manual_seed(0))
    assert all(p.a < 10 and p.b < 10 for p in small)


def test_reward_exact_match_and_malformed_outputs():
    assert exact_match_reward(ids("65$_"), "65") == 1.0
    assert exact_match_reward(ids("65$9"), "65") == 1.0  # after <eos> nothing counts
    assert exact_match_reward(ids("165$"), "165") == 1.0
    assert exact_match_reward(ids("66$_"), "65") == 0.0  # wrong
    assert exact_match_reward(ids("065$"), "65") == 0.0  # leading zero is not the answer
    assert exact_match_reward(ids("6$__"), "65") == 0.0  # truncated answer
    assert exact_match_reward(ids("6565"), "65") == 0.0  # no <eos>
    assert exact_match_reward(ids("65__"), "65") == 0.0  # padding, no <eos>
    assert exact_match_reward(ids("$___"), "65") == 0.0  # empty
    assert exact_match_reward(ids("6+5$"), "65") == 0.0  # non-digit
    assert exact_match_reward(ids("65=$"), "65") == 0.0
    assert exact_match_reward([VOCAB.bos, *ids("65$")], "65") == 0.0
    assert exact_match_reward(torch.tensor(ids("65$_")), "65") == 1.0
    task = AdditionTask()
    r = task.rewards([Problem(30, 35), Problem(1, 1)], torch.tensor([ids("65$_"), ids("3$__")]))
    assert r.tolist() == [1.0, 0.0]


def test_response_mask_stops_after_first_eos():
    m = response_mask(torch.tensor([ids("65$_"), ids("1$2$"), ids("1234"), ids("$___")]))
    assert m.tolist() == [
        [True, True, True, False],
        [True, True, False, False],
        [True] * 4,
        [True, False, False, False],
    ]


def test_vocab_roundtrip():
    assert VOCAB.size == 15
    assert VOCAB.decode(VOCAB.encode("12+34=")) == "12+34="
    assert len({VOCAB.pad, VOCAB.bos, VOCAB.eos}) == 3
