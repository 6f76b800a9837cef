"""Stand-in for flash-attn in sat_ext's OpenRLHF CPU runs only (sat_ext/openrlhf/cpu/__init__.py).

OpenRLHF 0.11.2 imports ``flash_attn.bert_padding`` and ``flash_attn.utils.distributed`` at module level
(``openrlhf/models/ring_attn_utils.py``). Sample packing (``--ds.packing_samples``, which
``--train.dynamic_batch_enable`` turns on) uses the four ``bert_padding`` functions, written here in plain torch
(:mod:`.bert_padding`); ring attention's ``all_gather`` raises (``--ds.ring_attn_size`` > 1 needs flash-attn's
CUDA kernels). There is no distribution metadata, so transformers keeps reporting flash-attn as not installed.
"""


def unavailable(name: str):
    """A function named ``name`` that raises: flash-attn is not installed."""

    def stand_in(*args, **kwargs):
        raise RuntimeError(
            f"flash_attn.{name} is not available: flash-attn is not installed (sat_ext's OpenRLHF CPU "
            "run does not use ring attention)"
        )

    stand_in.__name__ = name.rsplit(".", 1)[-1]
    return stand_in
