"""The verl examples' dataset class: verl's ``RLHFDataset`` with the sample count taken from the config only.

verl 0.9.1 reads a per-row ``__rollout_n__`` column before ``rollout.n`` / ``rollout.val_kwargs.n``
(``trainer/ppo/v1/agent_loop_tq.py:115``, ``trainer/ppo/v1/trainer_base.py:1055-1057``), so the evaluation
count would depend on which data file a run was given (a file written for another recipe gives the wrong
mean@N, silently). This class drops the column: the count is ``val_kwargs.n`` (evaluation) and ``rollout.n``
(training) of the example's config, whatever the file. Used through ``data.custom_cls`` (``path:
pkg://sat_ext.examples.verl_dataset``, ``name: ConfigCountDataset``); a file that carries the column is
reported once.
"""

from __future__ import annotations

import logging

from verl.utils.dataset.rl_dataset import RLHFDataset

ROLLOUT_N_COLUMN = "__rollout_n__"
_LOG = logging.getLogger(__name__)


class ConfigCountDataset(RLHFDataset):
    """``RLHFDataset`` whose rows never carry ``__rollout_n__``: verl then samples each prompt the config's n times."""

    _reported = False

    def __getitem__(self, item):
        row = super().__getitem__(item)
        dropped = row.pop(ROLLOUT_N_COLUMN, None)
        if dropped is not None and not ConfigCountDataset._reported:
            ConfigCountDataset._reported = True
            _LOG.warning(
                "%s: ignoring the data's %s=%s; the config's rollout.n / rollout.val_kwargs.n decides",
                self.data_files,
                ROLLOUT_N_COLUMN,
                dropped,
            )
        return row
