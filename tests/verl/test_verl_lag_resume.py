"""Resume keeps the lag totals: SATSeparateAsyncTrainer saves LagMetrics.state_dict() beside verl's checkpoint
and restores it in _load_checkpoint (verl's own save / load replaced by no-ops; the file round trip is real).
Cost: ~10 s (imports verl's V1 trainer and TransferQueue)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

pytest.importorskip("transfer_queue")

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync  # noqa: E402

from sat_ext.lag import LagMetrics  # noqa: E402
from sat_ext.verl.lag import trainer as lag_trainer  # noqa: E402


def _trainer(tmp_path, steps: int, resume_mode: str = "auto", resume_from_path=None):
    trainer = object.__new__(lag_trainer.SATSeparateAsyncTrainer)
    trainer.config = OmegaConf.create(
        {
            "trainer": {
                "default_local_dir": str(tmp_path),
                "resume_mode": resume_mode,
                "resume_from_path": resume_from_path,
            }
        }
    )
    trainer.global_steps = steps
    trainer.replay_buffer = SimpleNamespace(lag_metrics=LagMetrics((0, 1, 2)))
    return trainer


def test_dropped_and_regenerated_totals_survive_a_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(PPOTrainerSeparateAsync, "_save_checkpoint", lambda self: None)
    before = _trainer(tmp_path, steps=3)
    before.replay_buffer.lag_metrics.record_dropped(4, 100)
    before.replay_buffer.lag_metrics.record_regenerated(2, 10)
    before._save_checkpoint()
    saved = tmp_path / "global_step_3" / lag_trainer.LAG_STATE_FILE
    assert json.loads(saved.read_text()) == {"dropped_total": 4, "regenerated_total": 2}

    def verl_load(self):  # verl sets global_steps from the checkpoint folder it resumes from
        self.global_steps = 3

    monkeypatch.setattr(PPOTrainerSeparateAsync, "_load_checkpoint", verl_load)
    for after in (_trainer(tmp_path, 0), _trainer(tmp_path, 0, "resume_path", os.path.join(tmp_path, "global_step_3"))):
        after._load_checkpoint()
        metrics = after.replay_buffer.lag_metrics.flush(version=3, trainer_step=3)
        assert metrics["lag/dropped_total"] == 4.0 and metrics["lag/regenerated_total"] == 2.0
        assert metrics["lag/dropped"] == 0.0  # per-step counts start afresh


def test_a_fresh_start_keeps_zero_totals(tmp_path, monkeypatch):
    monkeypatch.setattr(PPOTrainerSeparateAsync, "_load_checkpoint", lambda self: None)
    trainer = _trainer(tmp_path, 0)
    trainer._load_checkpoint()
    assert trainer.replay_buffer.lag_metrics.state_dict() == {"dropped_total": 0, "regenerated_total": 0}
