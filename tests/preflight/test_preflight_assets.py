"""The preflight's stand-ins: the tiny model (tokenizer, family, warm start) and the data it runs on."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
import torch  # noqa: E402

from sat_ext.examples import math_reward  # noqa: E402
from sat_ext.preflight.assets import Assets  # noqa: E402
from sat_ext.preflight.data import read_jsonl_rows, write_rows  # noqa: E402
from sat_ext.tiny_model import ANSWER_FORMAT, family_of, longest_prompt, with_distractors  # noqa: E402


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return Assets(tmp_path_factory.mktemp("assets"))


@pytest.fixture(scope="module")
def built(assets):
    data = assets.data(None, "prompt")
    return data, *assets.model("qwen3_moe", data)


@pytest.mark.parametrize(
    "path,family",
    [("~/models/Qwen3-30B-A3B-Base", "qwen3_moe"), ("/m/Qwen3-1.7B-Base", "qwen3"), ("/m/my-MoE-7b", "qwen3_moe")],
)
def test_the_family_comes_from_the_name_where_the_model_is_not_here(path, family):
    assert family_of(path)[0] == family


def test_the_family_comes_from_config_json_where_the_model_is_here(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen3_moe"}')
    assert family_of(str(tmp_path)) == ("qwen3_moe", f"model_type 'qwen3_moe' in {tmp_path / 'config.json'}")


def test_the_tiny_moe_has_the_tokenizers_vocabulary_and_routes(built):
    from transformers import AutoConfig, AutoTokenizer

    data, model, prompt_tokens = built
    tokenizer = AutoTokenizer.from_pretrained(model.folder)
    config = AutoConfig.from_pretrained(model.folder)
    assert config.model_type == "qwen3_moe" and config.num_experts == 4 and config.num_experts_per_tok == 2
    assert config.vocab_size == len(tokenizer) == model.vocab_size  # vLLM masks logits past the tokenizer
    for row in data.train + data.val:  # byte-level: every prompt comes back as written
        text = tokenizer.apply_chat_template(row.messages, add_generation_prompt=True, tokenize=False)
        assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    assert prompt_tokens == longest_prompt(tokenizer, [r.messages for r in data.train + data.val]) < 64


def test_the_warm_start_gives_groups_that_score_both_1_and_0(built):
    """Sampled at temperature 1, the warm-started model writes the answer format and is right about half the
    time, by the examples' own verifier: every prompt's group of 16 has both rewards."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data, model, _ = built
    tokenizer = AutoTokenizer.from_pretrained(model.folder)
    policy = AutoModelForCausalLM.from_pretrained(model.folder).eval()
    assert model.warm_loss[1] < model.warm_loss[0] / 5
    torch.manual_seed(0)
    means = []
    for row in data.train[:4]:
        ids = tokenizer.apply_chat_template(
            row.messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        out = policy.generate(
            **ids,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            max_new_tokens=12,
            num_return_sequences=16,
            pad_token_id=tokenizer.pad_token_id,
        )
        texts = tokenizer.batch_decode(out[:, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        assert all(t.startswith("Answer:") for t in texts)
        means.append(sum(math_reward.compute_score(row.source, t, row.answers[0], row.extra_info) for t in texts) / 16)
    assert all(0.0 < m < 1.0 for m in means), means


def test_distractors_are_other_answers_of_the_data(built):
    data = built[0]
    mixed = with_distractors([r.example() for r in data.train])
    assert len(mixed) == 2 * len(data.train)
    for right, wrong in zip(mixed[: len(data.train)], mixed[len(data.train) :], strict=True):
        assert right.messages == wrong.messages and wrong.answer != right.answer
        assert wrong.answer in {r.answers[0] for r in data.train}


def test_rows_are_written_back_as_read_and_cycled(built, tmp_path, assets):
    import pandas as pd

    data = built[0]
    assert write_rows(data.train, tmp_path / "t.parquet", 20) == 20
    original = pd.read_parquet(assets.sample() / "train.parquet")
    again = pd.read_parquet(tmp_path / "t.parquet")
    assert len(again) == 20 and again.iloc[len(original)].to_dict().keys() == original.iloc[0].to_dict().keys()
    assert again.iloc[len(original)]["reward_model"] == original.iloc[0]["reward_model"]
    jsonl = assets.sample() / "openrlhf" / "train.jsonl"
    rows = read_jsonl_rows([jsonl])
    write_rows(rows, tmp_path / "t.jsonl", len(rows) + 1)
    assert read_jsonl_rows([tmp_path / "t.jsonl"])[-1].record == rows[0].record
    assert ANSWER_FORMAT.format(rows[0].answers[0]).startswith("Answer: ")
