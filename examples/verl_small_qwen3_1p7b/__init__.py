"""The small recipe (Qwen3-1.7B-Base): a folder of Hydra configs, importable so `pkg://` config paths reach it."""
