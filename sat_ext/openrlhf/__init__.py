"""SAT for OpenRLHF 0.11.2 (no policy-loss registry there; see patches/ for one).

- :mod:`sat_ext.openrlhf.loss`: ``SATPolicyLoss``, an OpenRLHF ``PolicyLoss`` for ``sat`` and ``sat_gspo``.
- :mod:`sat_ext.openrlhf.train_ppo_ray`: ``python -m sat_ext.openrlhf.train_ppo_ray <openrlhf flags>``.
- :mod:`sat_ext.openrlhf.actor`: the policy Ray actor class that builds SAT inside the worker.
- :mod:`sat_ext.openrlhf.compat`: imports OpenRLHF's real loss module where flash_attn/deepspeed are missing.

Nothing is imported here, so ``import sat_ext.openrlhf`` needs neither OpenRLHF nor torch.
"""
