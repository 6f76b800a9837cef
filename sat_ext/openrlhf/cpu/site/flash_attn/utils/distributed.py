"""Stand-in names (flash_attn's doc)."""

from .. import unavailable

all_gather = unavailable("utils.distributed.all_gather")
