"""verl >= 0.9 adapter: ``sat`` and ``sat_gspo`` in verl's policy-loss registry, and SAT's config dataclass.

Importing this package registers the losses (it imports :mod:`sat_ext.verl.loss`), so every way in does: the
``verl.plugins`` entry point (:mod:`sat_ext.verl.plugin`) and the ``_target_``
:class:`sat_ext.verl.config.SATPolicyLossConfig` that Hydra imports in every process that builds an ActorConfig.
verl hides a plugin's errors at DEBUG, so a failure here is written to stderr (:func:`report_failure`) and re-raised.
"""

import sys
import traceback

# verl first: `import verl` loads the plugins, whose entry point imports this package's config and losses. If
# a user imported sat_ext.verl.config before verl, that plugin load would run while the module is
# half-initialised and fail (a false "FAILED" message, or an ImportError with VERL_USE_EXTERNAL_MODULES).
# Importing verl here makes every order go through verl's own plugin path, which is the complete one.
import verl  # noqa: E402,F401


def report_failure() -> None:
    """Write the exception being handled to stderr, loudly (verl logs a plugin's exceptions at DEBUG only)."""
    sys.stderr.write(
        "sat_ext: FAILED to register the SAT policy losses with verl (verl hides plugin errors at DEBUG).\n"
        "Set VERL_USE_EXTERNAL_MODULES=sat_ext.verl.plugin to make verl raise, or run `sat-ext doctor`.\n"
        + traceback.format_exc()
    )


try:
    from . import loss  # noqa: E402,F401  (registers sat and sat_gspo in verl's POLICY_LOSS_REGISTRY)
except Exception:
    report_failure()
    raise
