"""The ``verl.plugins`` entry point: registers ``sat`` and ``sat_gspo`` when verl is imported, loudly.

With ``SAT_EXT_VERL_CPU=1`` in the environment it also installs the CPU setup (:mod:`sat_ext.verl.cpu`) in this
process. verl catches plugin exceptions and logs them at DEBUG (invisible by default), so a failure here is
first written to stderr with its traceback, then re-raised. ``sat-ext doctor`` checks the result.
"""

from __future__ import annotations

try:
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    from sat_ext.pinned import LOSS_NAMES
    from sat_ext.verl import loss as _loss  # noqa: F401  (importing it registers the losses)

    _missing = [n for n in LOSS_NAMES if n not in POLICY_LOSS_REGISTRY]
    if _missing:
        raise RuntimeError(f"sat_ext: losses {_missing} are not in verl's POLICY_LOSS_REGISTRY after import")
    from sat_ext.verl import cpu as _cpu

    if _cpu.requested():
        _cpu.activate()
except Exception:
    from sat_ext.verl import report_failure  # a failure inside the package's import has reported itself

    report_failure()
    raise
