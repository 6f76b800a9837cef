"""Stand-in for flash-attn in sat_ext's OpenRLHF CPU runs only (sat_ext/openrlhf/cpu/__init__.py).

OpenRLHF 0.11.2 imports ``flash_attn.bert_padding`` and ``flash_attn.utils.distributed`` at module level
(``openrlhf/models/ring_attn_utils.py``) for sample packing and ring attention, which a CPU run does not use.
The names exist so those imports succeed; calling any of them raises. There is no distribution metadata, so
transformers keeps reporting flash-attn as not installed.
"""


def unavailable(name: str):
    """A function named ``name`` that raises: flash-attn is not installed."""

    def stand_in(*args, **kwargs):
        raise RuntimeError(
            f"flash_attn.{name} is not available: flash-attn is not installed (sat_ext's OpenRLHF CPU "
            "run does not pack samples or use ring attention)"
        )

    stand_in.__name__ = name.rsplit(".", 1)[-1]
    return stand_in
