"""Hydra configs of the verl example (a package so that pkg://sat_ext.examples.verl_aime_qwen3_30b.config resolves)."""
