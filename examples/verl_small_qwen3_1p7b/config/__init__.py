"""The small recipe's Hydra configs: `--config-path pkg://sat_ext.examples.verl_small_qwen3_1p7b.config`."""
