"""The preflight's stand-in for the config's model: a tiny random model of the same architecture family, with a
byte-level BPE tokenizer trained on the run's own prompts, warm-started on the data's answers.

Why each part (docs/preflight.md, "The model"):

- same family: a Qwen3-MoE with expert routing where the config's model is one (Qwen3-30B-A3B), so the routing
  code paths of the trainer and of vLLM run; a dense Qwen3 otherwise;
- the tokenizer: the real one cannot be downloaded here; a BPE trained on the run's prompts and answers keeps a
  prompt short enough for the scaled ``data.max_prompt_length``, and its length is the model's vocabulary size
  exactly (vLLM masks logits past the tokenizer's length and the trainer does not);
- the warm start: a random model never writes a right answer, so the math verifier would score every sample 0,
  GRPO's advantages would be 0 and SAT would have nothing to act on. A few hundred supervised steps on
  ``Answer: <ground truth>`` make it write the answer format and the data's answers: sampled at the run's
  temperature, some samples of a group are right and some are wrong, scored by the config's own verifier.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

FAMILIES = ("qwen3", "qwen3_moe")
PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL = (PAD, IM_START, IM_END)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ANSWER_FORMAT = "Answer: {}"  # DAPO's prompt asks for it; the examples' verifier reads it


@dataclass(frozen=True)
class TinyShape:
    """The random model's size (head_dim 32: vLLM's CPU attention refuses 16). MoE: every layer sparse,
    ``experts`` experts with top-``top_k`` routing."""

    hidden_size: int = 64
    intermediate_size: int = 128
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 32
    experts: int = 4
    top_k: int = 2
    moe_intermediate_size: int = 64
    max_positions: int = 4096
    seed: int = 0


def shape_for(parallel: int, experts_parallel: int) -> TinyShape:
    """The tiny shape whose heads and key/value heads divide by the tensor-parallel size ``parallel`` and whose
    experts divide by the expert-parallel size (a GPU run keeps the config's parallel layout)."""
    base = TinyShape()
    if parallel <= 1 and experts_parallel <= 1:
        return base
    experts = max(base.experts, 2 * experts_parallel)
    return TinyShape(heads=2 * parallel, kv_heads=parallel, experts=experts - experts % max(1, experts_parallel))


@dataclass(frozen=True)
class Example:
    """One prompt of the run's data (chat messages) and an accepted answer."""

    messages: list[dict]
    answer: str


@dataclass(frozen=True)
class WarmStart:
    """Supervised steps on the data's answers: full batch, Adam at ``lr``; ``seed`` fixes the order of nothing
    (one full batch a step), only the initial weights."""

    steps: int = 300
    lr: float = 3e-3


def train_tokenizer(texts: Sequence[str], vocab_size: int = 1024, max_token_chars: int = 16):
    """A byte-level BPE over ``texts`` with the chat template and special tokens of Qwen3 (``<|im_end|>`` ends a
    turn and is the EOS token); any text encodes (bytes), nothing maps to an unknown token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=max_token_chars,
        show_progress=False,
    )
    core.train_from_iterator(list(texts), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=IM_END, unk_token=None, additional_special_tokens=[IM_START]
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(family: str, vocab_size: int, tokenizer, shape: TinyShape = TinyShape()):
    """A random float32 causal LM of ``family`` (:data:`FAMILIES`) over ``vocab_size`` tokens."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    if family not in FAMILIES:
        raise ValueError(f"model family must be one of {', '.join(FAMILIES)}, got {family!r}")
    common = dict(
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=shape.max_positions,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.convert_tokens_to_ids(IM_START),
        torch_dtype="float32",
    )
    torch.manual_seed(shape.seed)
    if family == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(**common))
    config = Qwen3MoeConfig(
        **common,
        moe_intermediate_size=shape.moe_intermediate_size,
        num_experts=shape.experts,
        num_experts_per_tok=shape.top_k,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        output_router_logits=False,
        router_aux_loss_coef=0.0,
    )
    return Qwen3MoeForCausalLM(config)


def _sft_batch(tokenizer, examples: Sequence[Example]):
    """Right-padded input ids and labels (-100 off the answer and its end-of-turn token)."""
    import torch

    rows = []
    for ex in examples:
        prompt = tokenizer.apply_chat_template(ex.messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(ANSWER_FORMAT.format(ex.answer), add_special_tokens=False)["input_ids"]
        answer_ids.append(tokenizer.eos_token_id)
        rows.append((prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids))
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row_ids, row_labels) in enumerate(rows):
        ids[i, : len(row_ids)] = torch.tensor(row_ids)
        labels[i, : len(row_labels)] = torch.tensor(row_labels)
        mask[i, : len(row_ids)] = 1
    return ids, mask, labels


def with_distractors(examples: Sequence[Example]) -> list[Example]:
    """Each prompt twice: with its answer and with the next prompt's (another of the data's answers), so the
    warm-started model writes the right answer about half the time: a group of samples scores both 1 and 0."""
    answers = [ex.answer for ex in examples]
    wrong = [next((a for a in answers[i + 1 :] + answers[:i] if a != ex.answer), None) for i, ex in enumerate(examples)]
    return list(examples) + [Example(ex.messages, w) for ex, w in zip(examples, wrong, strict=True) if w is not None]


def warm_start(model, tokenizer, examples: Sequence[Example], spec: WarmStart = WarmStart()) -> list[float]:
    """Train ``model`` in place to write ``Answer: <answer>`` after each prompt, the right answer or a distractor
    (:func:`with_distractors`) about equally often; returns the loss per step."""
    import torch

    ids, mask, labels = _sft_batch(tokenizer, with_distractors(examples))
    optim = torch.optim.Adam(model.parameters(), lr=spec.lr)
    model.train()
    losses = []
    for _ in range(spec.steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    model.eval()
    return losses


@dataclass(frozen=True)
class BuiltModel:
    """What :func:`write_tiny_model` made: the folder, the family, the vocabulary size and the warm start's
    first and last loss."""

    folder: Path
    family: str
    vocab_size: int
    warm_loss: tuple[float, float]


def write_tiny_model(
    folder: Path,
    family: str,
    texts: Sequence[str],
    examples: Sequence[Example],
    shape: TinyShape = TinyShape(),
    warm: WarmStart = WarmStart(),
) -> BuiltModel:
    """Tokenizer trained on ``texts``, a random ``family`` model, warm-started on ``examples``, saved under
    ``folder`` in the Hugging Face layout (float32, safetensors)."""
    import torch

    tokenizer = train_tokenizer(texts)
    model = build_model(family, len(tokenizer), tokenizer, shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(shape.seed)
        losses = warm_start(model, tokenizer, examples, warm)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": tokenizer.eos_token_id}))
    return BuiltModel(folder, family, len(tokenizer), (losses[0], losses[-1]))


def family_of(model_path: str) -> tuple[str, str]:
    """The family of the config's model (:data:`FAMILIES`) and how it was told: the ``model_type`` of its
    ``config.json`` where the folder exists here, else its name (``...-A3B...`` or ``MoE``: a mixture of experts)."""
    config = Path(model_path).expanduser() / "config.json"
    if config.is_file():
        model_type = json.loads(config.read_text()).get("model_type", "")
        return ("qwen3_moe" if "moe" in model_type else "qwen3"), f"model_type {model_type!r} in {config}"
    name = Path(model_path).name
    moe = re.search(r"-A\d+(\.\d+)?B|moe", name, flags=re.IGNORECASE) is not None
    return ("qwen3_moe" if moe else "qwen3"), f"the name {name!r} ({'mixture of experts' if moe else 'dense'})"


def longest_prompt(tokenizer, prompts: Sequence[list[dict]]) -> int:
    """Tokens of the longest chat prompt, with the chat template and the generation prompt."""
    texts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in prompts]
    return max(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)
