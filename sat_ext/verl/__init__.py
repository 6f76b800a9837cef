"""verl >= 0.9 adapter: ``sat`` and ``sat_gspo`` in verl's policy-loss registry, and SAT's config dataclass.

Importing :mod:`sat_ext.verl.loss` registers the losses; the ``verl.plugins`` entry point
(:mod:`sat_ext.verl.plugin`) and the ``_target_`` :class:`sat_ext.verl.config.SATPolicyLossConfig` (whose module
imports it) both do, so every process that builds an ActorConfig has the losses.
"""

# verl first: `import verl` loads the plugins, whose entry point imports this package's config and losses. If
# a user imported sat_ext.verl.config before verl, that plugin load would run while the module is
# half-initialised and fail (a false "FAILED" message, or an ImportError with VERL_USE_EXTERNAL_MODULES).
# Importing verl here makes every order go through verl's own plugin path, which is the complete one.
import verl  # noqa: E402,F401
