"""The verl example: Table 1 of the SAT paper on Qwen3-30B-A3B-Base; config/ is pkg://sat_ext.examples.verl_aime_qwen3_30b.config."""
