"""``sat-ext demo``: asynchronous RL with policy lag on one CPU, SAT against its baselines, in minutes.

A tiny random Qwen3-MoE (transformers, built offline) is warm-started on two-digit addition and then
trained with GRPO-style RL while a rollout copy lags the trainer under :mod:`sat_ext.lag`'s controller
(interval or bounded mode), with optional bf16 engine and MoE routing mismatch. The losses are called
through verl's real policy-loss registry when verl is installed. Entry point: :func:`sat_ext.demo.cli.main`.
"""
