"""verl >= 0.9 adapter: ``sat`` and ``sat_gspo`` in verl's policy-loss registry, and SAT's config dataclass.

Importing :mod:`sat_ext.verl.losses` registers the losses; the ``verl.plugins`` entry point
(:mod:`sat_ext.verl.plugin`) and the ``_target_`` of :class:`sat_ext.verl.config.SATPolicyLossConfig`
both import it, so every process that builds an ActorConfig has the losses.
"""
