"""``sat-ext demo``: asynchronous RL with policy lag on one CPU, SAT against its baselines, in minutes.

A tiny random Qwen3-MoE (transformers, built offline) is warm-started on a task (two-digit addition, or
writing a program in a small expression language) and then trained with GRPO-style RL while a rollout engine
(a real vLLM CPU engine, or an emulated copy) lags the trainer under :mod:`sat_ext.lag`'s controller. The
losses are called through verl's real policy-loss registry when verl is installed. Entry point:
:func:`sat_ext.demo.cli.main`; the layers: :mod:`~sat_ext.demo.plan` -> :mod:`~sat_ext.demo.execute` ->
:mod:`~sat_ext.demo.outputs`; one run: :mod:`~sat_ext.demo.train`; the verdicts: :mod:`~sat_ext.demo.stats`.
"""
