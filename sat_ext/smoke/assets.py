"""The smoke runs' model and data, built offline in seconds: a tiny random Qwen3, a character tokenizer with a
chat template, and a prompt set whose reward varies within a group (parquet in verl's layout, JSON lines in
OpenRLHF's).

The tokenizer has exactly as many tokens as the model's vocabulary: vLLM masks logits past the tokenizer's
length and the trainer does not, so a padded head would shift the rollout's log-probs against the trainer's.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

SPECIAL = ("<pad>", "<|im_start|>", "<|im_end|>")
CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 \n+=?.,:"
GENERATION_PROMPT = "<|im_start|>assistant\n"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}" + GENERATION_PROMPT + "{% endif %}"
)
TOKEN = "<\\|im_(?:start|end)\\|>|."  # one token: a special token or one character (newlines included)
DATA_SOURCE = "sat_ext_smoke"


def vocabulary() -> list[str]:
    """Special tokens, then one token per character."""
    return list(SPECIAL) + list(CHARS)


def write_model(folder: Path, shape=None) -> Path:
    """A random Qwen3 causal LM (:func:`sat_ext.tiny_model.build_model`'s dense family; ``shape`` a
    :class:`~sat_ext.tiny_model.TinyShape`, by default its own with 256 positions) and its character
    tokenizer under ``folder`` (Hugging Face layout); returns ``folder``."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from sat_ext.tiny_model import TinyShape, build_model

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(vocabulary())}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(TOKEN), behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        bos_token=None,
        unk_token="<pad>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    model = build_model("qwen3", len(vocab), tokenizer, shape or TinyShape(max_positions=256))
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": vocab["<|im_end|>"]}))
    return folder


def prompt_rows(count: int, seed: int = 0, agent_names: dict[int, str] | None = None) -> list[dict]:
    """``count`` addition prompts in verl's RL data layout; ``agent_names`` maps a row index to an agent loop."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        row = {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": f"{a}+{b}="}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"index": index},
        }
        if agent_names and index in agent_names:
            row["agent_name"] = agent_names[index]
        rows.append(row)
    if agent_names:  # every row needs the column once one row has it
        for row in rows:
            row.setdefault("agent_name", "single_turn_agent")
    return rows


def write_data(path: Path, rows: list[dict]) -> Path:
    """``rows`` as a parquet file (pandas + pyarrow, both verl dependencies)."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


def openrlhf_rows(count: int, seed: int = 0) -> list[dict]:
    """The prompts of :func:`prompt_rows` in OpenRLHF's layout (``--data.input_key prompt --data.label_key label``;
    ``datasource`` names the eval metrics)."""
    return [
        {
            "prompt": row["prompt"][0]["content"],
            "label": row["reward_model"]["ground_truth"],
            "datasource": row["data_source"],
        }
        for row in prompt_rows(count, seed)
    ]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """``rows`` as JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def response_text(decoded: str) -> str:
    """The response of a prompt + response decoded by the smoke tokenizer (tokens joined by single spaces, special
    tokens kept), without its special tokens: the text after the last generation prompt, spaces between tokens
    removed ("" if there is none)."""
    marker = " ".join(re.findall(TOKEN, GENERATION_PROMPT, flags=re.S))
    start = decoded.rfind(marker)
    if start < 0:
        return ""
    rest, tokens, i = decoded[start + len(marker) + 1 :], [], 0
    pattern = re.compile(TOKEN, flags=re.S)
    while i < len(rest):
        token = pattern.match(rest, i).group()
        tokens.append(token)
        i += len(token) + 1  # the separator
    return "".join(t for t in tokens if t not in SPECIAL)
