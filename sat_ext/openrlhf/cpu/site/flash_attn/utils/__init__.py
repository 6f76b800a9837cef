"""Stand-in package (flash_attn's doc)."""
